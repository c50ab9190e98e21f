// libavformat/libavcodec demux + decode to RGB24; WebP through io/webp_container.h (see the header).
#include "io/video_reader.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "diffq/error.h"
#include "io/libav_util.h"
#include "io/webp_container.h"

namespace diffq::io {

namespace {

constexpr const char* kCtx = "video";
constexpr uint64_t kMaxBytes = uint64_t(1) << 34;  // 16 GiB of RGB: a corrupt header, not a video

struct SwsHolder {  // sws_getCachedContext frees and replaces the context itself
  SwsContext* s = nullptr;
  SwsHolder() = default;
  SwsHolder(const SwsHolder&) = delete;
  SwsHolder& operator=(const SwsHolder&) = delete;
  ~SwsHolder() { sws_freeContext(s); }
};

struct CloseInput {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};

// Frames of one size, stacked into [F, H, W, C].
struct FrameStack {
  std::string path;
  int width = 0, height = 0, channels = 3;
  std::vector<uint8_t> bytes;
  int64_t count = 0;

  uint8_t* append(int w, int h) {
    if (count == 0) {
      width = w;
      height = h;
    }
    check(w == width && h == height, kCtx, path, ": frame ", count, " is ", w, "x", h, ", the first was ",
          width, "x", height, " (frames of different sizes are not supported)");
    const size_t frame = size_t(w) * h * channels;
    check(bytes.size() + frame <= kMaxBytes, kCtx, path, ": more than ", kMaxBytes >> 30, " GiB of frames");
    bytes.resize(bytes.size() + frame);
    ++count;
    return bytes.data() + bytes.size() - frame;
  }
  Tensor tensor() const {
    check(count > 0, kCtx, path, ": no video frames decoded");
    Tensor t = Tensor::empty({count, height, width, channels}, DType::u8);
    std::memcpy(t.data<uint8_t>(), bytes.data(), bytes.size());
    return t;
  }
};

// Converts a decoded frame to packed RGB24 / RGBA with the frame's own matrix and range.
void convert(SwsContext** sws, const AVFrame* f, AVPixelFormat to, uint8_t* dst, const std::string& path) {
  *sws = sws_getCachedContext(*sws, f->width, f->height, AVPixelFormat(f->format), f->width, f->height, to,
                              SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
  check(*sws != nullptr, kCtx, path, ": cannot convert ", av_get_pix_fmt_name(AVPixelFormat(f->format)),
        " frames to RGB");
  const int spc = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : int(f->colorspace);
  const AVPixelFormat fmt = AVPixelFormat(f->format);
  const bool full = f->color_range == AVCOL_RANGE_JPEG || fmt == AV_PIX_FMT_YUVJ420P ||
                    fmt == AV_PIX_FMT_YUVJ422P || fmt == AV_PIX_FMT_YUVJ444P;
  const int* coef = sws_getCoefficients(spc);
  sws_setColorspaceDetails(*sws, coef, full ? 1 : 0, coef, 1, 0, 1 << 16, 1 << 16);
  uint8_t* planes[1] = {dst};
  const int strides[1] = {f->width * (to == AV_PIX_FMT_RGBA ? 4 : 3)};
  sws_scale(*sws, f->data, f->linesize, 0, f->height, planes, strides);
}

std::vector<uint8_t> read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), kCtx, "cannot open ", path.string());
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---- WebP ----------------------------------------------------------------------------------------

// Decodes one standalone WebP bitstream (as webp_container builds it) to RGBA [h, w, 4].
std::vector<uint8_t> decode_webp_image(const std::vector<uint8_t>& file, int expect_w, int expect_h,
                                       const std::string& what, SwsContext** sws) {
  const AVCodec* dec = avcodec_find_decoder(AV_CODEC_ID_WEBP);
  check(dec != nullptr, kCtx, what, ": this libavcodec has no WebP decoder");
  libav::CodecContextPtr c(avcodec_alloc_context3(dec));
  check(bool(c), kCtx, what, ": avcodec_alloc_context3 failed");
  c->thread_count = 1;
  int r = avcodec_open2(c.get(), dec, nullptr);
  check(r >= 0, kCtx, what, ": opening the WebP decoder: ", libav::err_str(r), libav::last_log());
  libav::PacketPtr pkt(av_packet_alloc());
  libav::FramePtr frame(av_frame_alloc());
  check(pkt && frame, kCtx, what, ": out of memory");
  r = av_new_packet(pkt.get(), int(file.size()));
  check(r >= 0, kCtx, what, ": av_new_packet: ", libav::err_str(r));
  std::memcpy(pkt->data, file.data(), file.size());
  r = avcodec_send_packet(c.get(), pkt.get());
  check(r >= 0, kCtx, what, ": decoding failed: ", libav::err_str(r), libav::last_log());
  r = avcodec_receive_frame(c.get(), frame.get());
  if (r == AVERROR(EAGAIN)) {
    avcodec_send_packet(c.get(), nullptr);
    r = avcodec_receive_frame(c.get(), frame.get());
  }
  check(r >= 0, kCtx, what, ": decoding failed: ", libav::err_str(r), libav::last_log());
  check(frame->width == expect_w && frame->height == expect_h, kCtx, what, ": the bitstream is ", frame->width,
        "x", frame->height, ", its frame header says ", expect_w, "x", expect_h);
  std::vector<uint8_t> rgba(size_t(expect_w) * expect_h * 4);
  convert(sws, frame.get(), AV_PIX_FMT_RGBA, rgba.data(), what);
  return rgba;
}

DecodedVideo read_webp(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  const std::string name = path.string();
  const WebpContainer wc = parse_webp_container(bytes.data(), bytes.size(), name);
  DecodedVideo out;
  out.codec = "webp";
  out.loop_count = wc.animated ? wc.loop_count : -1;
  if (!wc.xmp.empty()) out.metadata["xmp"] = wc.xmp;

  check(uint64_t(wc.canvas_width) * wc.canvas_height * 3 * wc.frames.size() <= kMaxBytes, kCtx, name,
        ": more than ", kMaxBytes >> 30, " GiB of frames");
  SwsHolder sws;
  const size_t W = size_t(wc.canvas_width), H = size_t(wc.canvas_height);
  std::vector<uint8_t> canvas(W * H * 4, 0);  // RGBA, starts transparent (as libwebp's demuxer)
  FrameStack stack;
  stack.path = name;
  int64_t total_ms = 0;
  for (size_t i = 0; i < wc.frames.size(); ++i) {
    const WebpFrame& f = wc.frames[i];
    const std::string what = cat(name, ": frame ", i);
    const std::vector<uint8_t> img = decode_webp_image(standalone_webp(f), f.width, f.height, what, &sws.s);
    for (int y = 0; y < f.height; ++y) {
      for (int x = 0; x < f.width; ++x) {
        const uint8_t* s = img.data() + (size_t(y) * f.width + x) * 4;
        uint8_t* d = canvas.data() + ((size_t(f.y) + y) * W + (size_t(f.x) + x)) * 4;
        if (!f.blend || s[3] == 255) {
          std::memcpy(d, s, 4);
        } else if (s[3] != 0) {  // non-premultiplied "over", as the container spec writes it
          const int sa = s[3], da = d[3] * (255 - sa) / 255, a = sa + da;
          for (int k = 0; k < 3; ++k) d[k] = uint8_t((s[k] * sa + d[k] * da + a / 2) / a);
          d[3] = uint8_t(a);
        }
      }
    }
    uint8_t* rgb = stack.append(int(W), int(H));
    for (size_t p = 0; p < W * H; ++p) std::memcpy(rgb + p * 3, canvas.data() + p * 4, 3);
    if (f.dispose)  // to transparent, before the next frame
      for (int y = 0; y < f.height; ++y)
        std::memset(canvas.data() + ((size_t(f.y) + y) * W + f.x) * 4, 0, size_t(f.width) * 4);
    if (i + 1 < wc.frames.size()) total_ms += f.duration_ms;
  }
  out.frames_u8 = stack.tensor();
  if (!wc.animated) {
    out.fps = 0;
  } else if (wc.frames.size() > 1 && total_ms > 0) {  // the last frame's duration is not a frame interval
    out.fps = 1000.0 * double(wc.frames.size() - 1) / double(total_ms);
  } else if (wc.frames[0].duration_ms > 0) {
    out.fps = 1000.0 / wc.frames[0].duration_ms;
  }
  return out;
}

// ---- everything else: libavformat ------------------------------------------------------------------

DecodedVideo read_libav(const std::filesystem::path& path) {
  const std::string name = path.string();
  AVFormatContext* raw = nullptr;
  int r = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  check(r >= 0, kCtx, "cannot read ", name, ": ", libav::err_str(r), libav::last_log());
  std::unique_ptr<AVFormatContext, CloseInput> ic(raw);
  r = avformat_find_stream_info(ic.get(), nullptr);
  check(r >= 0, kCtx, "cannot read ", name, ": no stream information: ", libav::err_str(r), libav::last_log());
  const AVCodec* dec = nullptr;
  const int si = av_find_best_stream(ic.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &dec, 0);
  check(si >= 0, kCtx, "cannot read ", name, ": ",
        si == AVERROR_DECODER_NOT_FOUND ? "no decoder for its video stream" : "no video stream");
  AVStream* st = ic->streams[si];

  DecodedVideo out;
  out.codec = avcodec_get_name(st->codecpar->codec_id);
  const AVRational rate = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? st->avg_frame_rate
                                                                                    : st->r_frame_rate;
  out.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0.0;
  const AVDictionaryEntry* tag = nullptr;
  while ((tag = av_dict_get(ic->metadata, "", tag, AV_DICT_IGNORE_SUFFIX))) out.metadata[tag->key] = tag->value;

  libav::CodecContextPtr c(avcodec_alloc_context3(dec));
  check(bool(c), kCtx, "cannot read ", name, ": avcodec_alloc_context3 failed");
  r = avcodec_parameters_to_context(c.get(), st->codecpar);
  check(r >= 0, kCtx, "cannot read ", name, ": ", libav::err_str(r));
  r = avcodec_open2(c.get(), dec, nullptr);
  check(r >= 0, kCtx, "cannot read ", name, ": opening the ", out.codec, " decoder: ", libav::err_str(r),
        libav::last_log());

  libav::PacketPtr pkt(av_packet_alloc());
  libav::FramePtr frame(av_frame_alloc());
  check(pkt && frame, kCtx, "cannot read ", name, ": out of memory");
  SwsHolder sws;
  FrameStack stack;
  stack.path = name;
  auto receive = [&] {
    for (;;) {
      int rr = avcodec_receive_frame(c.get(), frame.get());
      if (rr == AVERROR(EAGAIN) || rr == AVERROR_EOF) return;
      check(rr >= 0, kCtx, "cannot read ", name, ": decoding frame ", stack.count, ": ", libav::err_str(rr),
            libav::last_log());
      uint8_t* dst = stack.append(frame->width, frame->height);
      convert(&sws.s, frame.get(), AV_PIX_FMT_RGB24, dst, name);
      av_frame_unref(frame.get());
    }
  };
  while ((r = av_read_frame(ic.get(), pkt.get())) >= 0) {
    if (pkt->stream_index == si) {
      const int s = avcodec_send_packet(c.get(), pkt.get());
      av_packet_unref(pkt.get());
      check(s >= 0 || s == AVERROR(EAGAIN), kCtx, "cannot read ", name, ": decoding: ", libav::err_str(s),
            libav::last_log());
      receive();
    } else {
      av_packet_unref(pkt.get());
    }
  }
  check(r == AVERROR_EOF, kCtx, "cannot read ", name, ": ", libav::err_str(r), libav::last_log());
  avcodec_send_packet(c.get(), nullptr);  // flush the decoder's delayed frames
  receive();
  out.frames_u8 = stack.tensor();
  return out;
}

}  // namespace

DecodedVideo read_video(const std::filesystem::path& path) {
  libav::install_log_capture();
  libav::clear_log();
  std::error_code ec;
  check(std::filesystem::is_regular_file(path, ec), kCtx, "cannot read ", path.string(),
        std::filesystem::exists(path, ec) ? ": not a regular file" : ": no such file");
  char head[12] = {0};
  {
    std::ifstream in(path, std::ios::binary);
    check(bool(in), kCtx, "cannot open ", path.string());
    in.read(head, sizeof head);
  }
  if (std::memcmp(head, "RIFF", 4) == 0 && std::memcmp(head + 8, "WEBP", 4) == 0)
    return read_webp(path, read_all(path));
  return read_libav(path);
}

}  // namespace diffq::io
