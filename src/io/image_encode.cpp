// JPEG (mjpeg, full-range YUV 4:2:0) and WebP (libwebp) of one image, encoded as a single packet: both
// encoders emit a complete file per frame (JFIF SOI..EOI; a RIFF "WEBP" container).
#include "io/image_encode.h"

#include "diffq/error.h"
#include "io/libav_util.h"

extern "C" {
#include <libavutil/opt.h>
}

namespace diffq::io {

namespace {
constexpr const char* kCtx = "image";
}

std::vector<uint8_t> encode_still(const uint8_t* rgb, int64_t width, int64_t height, const std::string& format) {
  check(format == "jpeg" || format == "webp", kCtx, "cannot encode '", format, "' (jpeg or webp; png: io/png.h)");
  check(width > 0 && height > 0 && width <= 16384 && height <= 16384, kCtx, "image size ", width, "x", height,
        " is out of range");
  libav::install_log_capture();
  libav::clear_log();
  const bool jpeg = format == "jpeg";
  const char* codec_name = jpeg ? "mjpeg" : "libwebp";
  const AVCodec* codec = avcodec_find_encoder_by_name(codec_name);
  check(codec != nullptr, kCtx, "this libavcodec has no '", codec_name, "' encoder for ", format);
  libav::CodecContextPtr enc(avcodec_alloc_context3(codec));
  check(enc != nullptr, kCtx, "avcodec_alloc_context3 failed");
  AVCodecContext* c = enc.get();
  // mjpeg encodes 4:2:0 in whole 16x16 MCUs but takes any size; libwebp any size too.
  c->width = int(width);
  c->height = int(height);
  c->time_base = AVRational{1, 25};
  AVDictionary* opts = nullptr;
  if (jpeg) {
    c->pix_fmt = AV_PIX_FMT_YUVJ420P;
    c->color_range = AVCOL_RANGE_JPEG;
    c->flags |= AV_CODEC_FLAG_QSCALE;
    c->global_quality = FF_QP2LAMBDA * 3;  // qscale 3: ~quality 90
    c->strict_std_compliance = FF_COMPLIANCE_UNOFFICIAL;
  } else {
    c->pix_fmt = AV_PIX_FMT_RGB32;
    av_dict_set_int(&opts, "quality", 90, 0);
    av_dict_set(&opts, "lossless", "0", 0);
  }
  int r = avcodec_open2(c, codec, &opts);
  av_dict_free(&opts);
  check(r >= 0, kCtx, "opening the ", codec_name, " encoder failed: ", libav::err_str(r), libav::last_log());

  libav::FramePtr frame(av_frame_alloc());
  libav::PacketPtr pkt(av_packet_alloc());
  check(frame && pkt, kCtx, "av_frame_alloc failed");
  frame->format = c->pix_fmt;
  frame->width = c->width;
  frame->height = c->height;
  frame->color_range = c->color_range;
  r = av_frame_get_buffer(frame.get(), 0);
  check(r >= 0, kCtx, "av_frame_get_buffer: ", libav::err_str(r));
  libav::SwsPtr sws(sws_getContext(c->width, c->height, AV_PIX_FMT_RGB24, c->width, c->height, c->pix_fmt,
                                   SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
  check(sws != nullptr, kCtx, "sws_getContext (RGB24 -> ", format, ") failed");
  if (jpeg) {
    const int* coef = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(sws.get(), coef, 1, coef, /*dst full range*/ 1, 0, 1 << 16, 1 << 16);
  }
  const uint8_t* src[1] = {rgb};
  const int src_stride[1] = {int(width * 3)};
  sws_scale(sws.get(), src, src_stride, 0, c->height, frame->data, frame->linesize);
  frame->pts = 0;

  std::vector<uint8_t> out;
  r = avcodec_send_frame(c, frame.get());
  check(r >= 0, kCtx, "encoding ", format, " failed: ", libav::err_str(r), libav::last_log());
  r = avcodec_send_frame(c, nullptr);  // flush
  check(r >= 0, kCtx, "flushing the ", format, " encoder failed: ", libav::err_str(r));
  while ((r = avcodec_receive_packet(c, pkt.get())) >= 0) {
    out.insert(out.end(), pkt->data, pkt->data + pkt->size);
    av_packet_unref(pkt.get());
  }
  check(r == AVERROR_EOF || r == AVERROR(EAGAIN), kCtx, "encoding ", format, " failed: ", libav::err_str(r));
  check(!out.empty(), kCtx, "the ", codec_name, " encoder produced no bytes");
  return out;
}

}  // namespace diffq::io
