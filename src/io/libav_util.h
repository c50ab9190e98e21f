// Shared by io/video_writer.cpp and io/video_reader.cpp (not a public header): owning handles for
// libav objects, libav's error strings, and libav's log routed into diffq's errors.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/error.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <memory>
#include <string>

namespace diffq::io::libav {

// av_err2str as a std::string ("Permission denied", "Invalid data found when processing input").
std::string err_str(int errnum);

// libav logs through one process-wide callback. diffq installs its own once (idempotent): messages
// of level AV_LOG_ERROR and worse are kept per thread (last_log() returns them, so an exception can
// name what the encoder or muxer said, e.g. x264's complaints), nothing is printed. With the
// environment variable DIFFQ_AV_LOG=1 everything down to AV_LOG_INFO also goes to stderr.
void install_log_capture();
void clear_log();
std::string last_log();  // "" or " (libav: <messages>)", ready to append to an error

struct FreeFrame { void operator()(AVFrame* f) const { av_frame_free(&f); } };
struct FreePacket { void operator()(AVPacket* p) const { av_packet_free(&p); } };
struct FreeCodecContext { void operator()(AVCodecContext* c) const { avcodec_free_context(&c); } };
struct FreeSws { void operator()(SwsContext* s) const { sws_freeContext(s); } };
using FramePtr = std::unique_ptr<AVFrame, FreeFrame>;
using PacketPtr = std::unique_ptr<AVPacket, FreePacket>;
using CodecContextPtr = std::unique_ptr<AVCodecContext, FreeCodecContext>;
using SwsPtr = std::unique_ptr<SwsContext, FreeSws>;

}  // namespace diffq::io::libav
