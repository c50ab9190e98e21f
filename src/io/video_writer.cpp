// mp4 (libx264) and animated WebP (libwebp) through libavcodec/libavformat; PNG frame folders.
// See video_writer.h for the choices (crf, padding, metadata per container).
#include "io/video_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "diffq/error.h"
#include "io/libav_util.h"
#include "io/png.h"

extern "C" {
#include <libavutil/opt.h>
}

namespace diffq::io {

namespace {

constexpr const char* kCtx = "video";
constexpr int kDefaultCrf = 25;       // imageio-ffmpeg: int((1 - quality / 10) * 51) at quality 5
constexpr int kWebpQuality = 90;      // libwebp's 0..100; ffmpeg's default 75 bands smooth gradients

enum class Container { mp4, webp };

std::string lower_ext(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return e;
}

// uint8 [F, H, W, 3] on the CPU, contiguous.
Tensor checked_frames(const Tensor& frames, const std::string& what) {
  check(frames.defined(), kCtx, what, ": no frames tensor");
  check(frames.dtype() == DType::u8, kCtx, what, ": frames must be uint8 [F, H, W, 3] RGB, got ", frames.str());
  check(frames.dim() == 4 && frames.size(3) == 3, kCtx, what, ": frames must be [F, H, W, 3] (RGB), got ",
        frames.str());
  check(frames.size(0) >= 1 && frames.size(1) >= 1 && frames.size(2) >= 1, kCtx, what,
        ": frames must not be empty, got ", frames.str());
  check(frames.size(1) <= 16384 && frames.size(2) <= 16384, kCtx, what, ": frame size ", frames.size(2), "x",
        frames.size(1), " is larger than 16384");
  Tensor t = frames.device().is_cpu() ? frames : frames.to(Device::cpu());
  return t.is_contiguous() ? t : t.contiguous();
}

// The temporary sibling the muxer writes; removed by the destructor unless released by commit().
class TempFile {
 public:
  explicit TempFile(const std::filesystem::path& target) : target_(target) {
    const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
    std::random_device rd;
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
      path_ = dir / cat(".", target.filename().string(), ".tmp.", ::getpid(), ".", rd());
      fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0)
      fail(kCtx, "cannot write ", target.string(), ": cannot create a temporary file in ", dir.string(), ": ",
           std::strerror(errno));
    ::close(fd);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove(path_, ec);
    }
  }
  const std::filesystem::path& path() const { return path_; }
  // fsync, then rename over the target.
  void commit() {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int e = errno;
      if (fd >= 0) ::close(fd);
      fail(kCtx, "cannot write ", target_.string(), ": fsync of ", path_.string(), " failed: ", std::strerror(e));
    }
    ::close(fd);
    std::error_code ec;
    std::filesystem::rename(path_, target_, ec);
    if (ec) fail(kCtx, "cannot write ", target_.string(), ": rename of ", path_.string(), " failed: ", ec.message());
    path_.clear();
  }

 private:
  std::filesystem::path target_, path_;
};

// Output context with its AVIOContext closed on destruction (before TempFile removes the file).
struct Muxer {
  AVFormatContext* oc = nullptr;
  ~Muxer() {
    if (!oc) return;
    if (oc->pb && !(oc->oformat->flags & AVFMT_NOFILE)) avio_closep(&oc->pb);
    avformat_free_context(oc);
  }
};

struct Encoder {
  std::string path;  // the target, for messages
  Container kind;
  int width = 0, height = 0;          // the source frames
  int enc_width = 0, enc_height = 0;  // what the encoder gets (mp4: even)
  double fps = 16.0;
  Muxer mux;
  AVStream* st = nullptr;
  libav::CodecContextPtr enc;
  libav::SwsPtr sws;
  libav::FramePtr frame;
  libav::PacketPtr pkt;
  int64_t packets = 0;

  [[noreturn]] void av_fail(const char* what, int err) const {
    fail(kCtx, "cannot write ", path, ": ", what, ": ", libav::err_str(err), libav::last_log());
  }
  // The timestamp of frame i in the codec's time base (webp: milliseconds, rounded).
  int64_t pts_of(int64_t i) const {
    return kind == Container::mp4 ? i : int64_t(std::llround(double(i) * 1000.0 / fps));
  }
};

void drain(Encoder& e) {
  for (;;) {
    int r = avcodec_receive_packet(e.enc.get(), e.pkt.get());
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
    if (r < 0) e.av_fail("encoding failed", r);
    AVPacket* p = e.pkt.get();
    if (e.kind == Container::webp) {  // no delay: packet k is frame k; its display time to the next
      p->pts = p->dts = e.pts_of(e.packets);
      p->duration = e.pts_of(e.packets + 1) - e.pts_of(e.packets);
    } else if (p->duration <= 0) {
      p->duration = 1;
    }
    ++e.packets;
    av_packet_rescale_ts(p, e.enc->time_base, e.st->time_base);
    p->stream_index = e.st->index;
    r = av_interleaved_write_frame(e.mux.oc, p);  // takes the packet's reference
    if (r < 0) e.av_fail("writing a packet failed", r);
  }
}

void open_encoder(Encoder& e, const std::filesystem::path& tmp, const VideoWriteOptions& opt) {
  const bool mp4 = e.kind == Container::mp4;
  const char* codec_name = mp4 ? "libx264" : "libwebp";
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name);
  if (!codec)
    fail(kCtx, "cannot write ", e.path, ": this libavcodec (", AV_STRINGIFY(LIBAVCODEC_VERSION),
         ") has no '", codec_name, "' encoder (", mp4 ? "H.264 for .mp4" : "WebP for .webp",
         "); Debian's libavcodec59 has it, an FFmpeg built without --enable-", codec_name, " does not");

  int r = avformat_alloc_output_context2(&e.mux.oc, nullptr, mp4 ? "mp4" : "webp", tmp.c_str());
  if (r < 0 || !e.mux.oc) e.av_fail(mp4 ? "no mp4 muxer" : "no webp muxer", r < 0 ? r : AVERROR_MUXER_NOT_FOUND);
  e.st = avformat_new_stream(e.mux.oc, nullptr);
  if (!e.st) e.av_fail("avformat_new_stream", AVERROR(ENOMEM));

  e.enc.reset(avcodec_alloc_context3(codec));
  if (!e.enc) e.av_fail("avcodec_alloc_context3", AVERROR(ENOMEM));
  AVCodecContext* c = e.enc.get();
  const AVRational rate = av_d2q(opt.fps, 1 << 20);  // 16 -> 16/1, 23.976 -> 2997/125
  c->width = e.enc_width;
  c->height = e.enc_height;
  c->sample_aspect_ratio = AVRational{1, 1};
  c->framerate = rate;
  c->time_base = mp4 ? av_inv_q(rate) : AVRational{1, 1000};
  AVDictionary* copts = nullptr;
  if (mp4) {
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->color_range = AVCOL_RANGE_MPEG;
    c->colorspace = AVCOL_SPC_SMPTE170M;  // the BT.601 matrix swscale converts with (below)
    av_dict_set(&copts, "preset", "medium", 0);
    av_dict_set_int(&copts, "crf", effective_crf(opt), 0);
  } else {
    c->pix_fmt = AV_PIX_FMT_RGB32;  // libwebp converts to its YUV itself (sharper chroma than swscale's)
    av_dict_set_int(&copts, "quality", kWebpQuality, 0);
    av_dict_set(&copts, "lossless", "0", 0);
  }
  if (e.mux.oc->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  r = avcodec_open2(c, codec, &copts);
  av_dict_free(&copts);
  if (r < 0) e.av_fail(mp4 ? "opening libx264 failed" : "opening libwebp failed", r);
  r = avcodec_parameters_from_context(e.st->codecpar, c);
  if (r < 0) e.av_fail("avcodec_parameters_from_context", r);
  e.st->time_base = c->time_base;
  e.st->avg_frame_rate = rate;
  e.st->r_frame_rate = rate;

  if (mp4) {
    for (const auto& [k, v] : opt.metadata) {
      check(!k.empty(), kCtx, "cannot write ", e.path, ": empty metadata key");
      av_dict_set(&e.mux.oc->metadata, k.c_str(), v.c_str(), 0);  // freed with the context
    }
  }
  AVDictionary* mopts = nullptr;
  if (mp4) {
    av_dict_set(&mopts, "movflags", "+faststart+use_metadata_tags", 0);
  } else {
    av_dict_set(&mopts, "loop", "0", 0);  // 0: loop forever
  }
  r = avio_open(&e.mux.oc->pb, tmp.c_str(), AVIO_FLAG_WRITE);
  if (r < 0) {
    av_dict_free(&mopts);
    e.av_fail("cannot open the temporary file", r);
  }
  r = avformat_write_header(e.mux.oc, &mopts);
  av_dict_free(&mopts);
  if (r < 0) e.av_fail("writing the header failed", r);

  e.frame.reset(av_frame_alloc());
  e.pkt.reset(av_packet_alloc());
  if (!e.frame || !e.pkt) e.av_fail("av_frame_alloc", AVERROR(ENOMEM));
  e.frame->format = c->pix_fmt;
  e.frame->width = c->width;
  e.frame->height = c->height;
  e.frame->color_range = c->color_range;
  e.frame->colorspace = c->colorspace;
  r = av_frame_get_buffer(e.frame.get(), 0);
  if (r < 0) e.av_fail("av_frame_get_buffer", r);

  e.sws.reset(sws_getContext(e.enc_width, e.enc_height, AV_PIX_FMT_RGB24, e.enc_width, e.enc_height, c->pix_fmt,
                             SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
  if (!e.sws) e.av_fail("sws_getContext (RGB24 -> encoder format)", AVERROR(EINVAL));
  if (mp4) {
    const int* coef = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(e.sws.get(), coef, /*srcRange full*/ 1, coef, /*dstRange limited*/ 0, 0, 1 << 16,
                             1 << 16);
  }
}

}  // namespace

int effective_crf(const VideoWriteOptions& opt) { return opt.crf < 0 ? kDefaultCrf : opt.crf; }

void write_video(const std::filesystem::path& path, const Tensor& frames_u8, const VideoWriteOptions& opt) {
  const std::string name = path.string();
  const std::string ext = lower_ext(path);
  check(ext == ".mp4" || ext == ".webp", kCtx, "cannot write ", name, ": unknown video format '", ext,
        "' (expected .mp4 or .webp)");
  const Tensor frames = checked_frames(frames_u8, cat("cannot write ", name));
  check(std::isfinite(opt.fps) && opt.fps > 0 && opt.fps <= 1000, kCtx, "cannot write ", name, ": fps ", opt.fps,
        " must be in (0, 1000]");
  check(opt.crf >= -1 && opt.crf <= 51, kCtx, "cannot write ", name, ": crf ", opt.crf,
        " must be -1 (default) or 0..51");
  check(!std::filesystem::is_directory(path), kCtx, "cannot write ", name, ": it is a directory");

  libav::install_log_capture();
  libav::clear_log();
  TempFile tmp(path);  // removed on any exception below, after the muxer (declared later) closed it
  Encoder e;
  e.path = name;
  e.kind = ext == ".mp4" ? Container::mp4 : Container::webp;
  e.fps = opt.fps;
  const int64_t F = frames.size(0);
  e.height = int(frames.size(1));
  e.width = int(frames.size(2));
  const bool even = e.kind == Container::mp4;  // yuv420p: pad odd sizes by one repeated column / row
  e.enc_width = even ? (e.width + 1) / 2 * 2 : e.width;
  e.enc_height = even ? (e.height + 1) / 2 * 2 : e.height;

  {
    open_encoder(e, tmp.path(), opt);
    const uint8_t* src = frames.data<uint8_t>();
    const size_t frame_bytes = size_t(e.height) * e.width * 3;
    const bool pad = e.enc_width != e.width || e.enc_height != e.height;
    std::vector<uint8_t> padded(pad ? size_t(e.enc_height) * e.enc_width * 3 : 0);
    for (int64_t i = 0; i < F; ++i) {
      const uint8_t* rgb = src + size_t(i) * frame_bytes;  // [H, W, 3]
      int stride = e.width * 3;
      if (pad) {  // edge replication: the last column / row repeated
        for (int y = 0; y < e.enc_height; ++y) {
          const uint8_t* row = rgb + size_t(std::min(y, e.height - 1)) * e.width * 3;
          uint8_t* out = padded.data() + size_t(y) * e.enc_width * 3;
          std::memcpy(out, row, size_t(e.width) * 3);
          if (e.enc_width > e.width) std::memcpy(out + size_t(e.width) * 3, row + size_t(e.width - 1) * 3, 3);
        }
        rgb = padded.data();
        stride = e.enc_width * 3;
      }
      int r = av_frame_make_writable(e.frame.get());
      if (r < 0) e.av_fail("av_frame_make_writable", r);
      const uint8_t* src_planes[1] = {rgb};
      const int src_strides[1] = {stride};
      sws_scale(e.sws.get(), src_planes, src_strides, 0, e.enc_height, e.frame->data, e.frame->linesize);
      e.frame->pts = e.pts_of(i);
      r = avcodec_send_frame(e.enc.get(), e.frame.get());
      if (r < 0) e.av_fail("encoding a frame failed", r);
      drain(e);
    }
    int r = avcodec_send_frame(e.enc.get(), nullptr);  // flush
    if (r < 0 && r != AVERROR_EOF) e.av_fail("flushing the encoder failed", r);
    drain(e);
    check(e.packets == F, kCtx, "cannot write ", name, ": the encoder returned ", e.packets, " packets for ", F,
          " frames");
    r = av_write_trailer(e.mux.oc);
    if (r < 0) e.av_fail("writing the trailer failed", r);
    r = avio_closep(&e.mux.oc->pb);
    if (r < 0) e.av_fail("closing the temporary file failed", r);
  }
  tmp.commit();
}

void write_frames_png(const std::filesystem::path& dir, const Tensor& frames_u8,
                      const std::map<std::string, std::string>& metadata) {
  const Tensor frames = checked_frames(frames_u8, cat("cannot write frames to ", dir.string()));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec && std::filesystem::is_directory(dir), kCtx, "cannot write frames to ", dir.string(),
        ": cannot create the folder: ", ec ? ec.message() : "a file is in the way");
  PngText text(metadata.begin(), metadata.end());
  const int64_t F = frames.size(0), H = frames.size(1), W = frames.size(2);
  for (int64_t i = 0; i < F; ++i) {
    char file[32];
    std::snprintf(file, sizeof file, "%05lld.png", static_cast<long long>(i));
    write_png(dir / file, frames.data<uint8_t>() + size_t(i) * H * W * 3, W, H, text);
  }
}

}  // namespace diffq::io
