#include "io/webp_container.h"

#include <cstring>

#include "diffq/error.h"

namespace diffq::io {

namespace {

constexpr const char* kCtx = "webp";
constexpr int kMaxSide = 1 << 14;  // libwebp's limit (16383)

uint32_t rd24(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16; }
uint32_t rd32(const uint8_t* p) { return rd24(p) | uint32_t(p[3]) << 24; }
void wr32(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(uint8_t(x >> (8 * i)));
}
void wr24(std::vector<uint8_t>& v, uint32_t x) {
  for (int i = 0; i < 3; ++i) v.push_back(uint8_t(x >> (8 * i)));
}

struct Chunk {
  std::string_view fourcc;
  const uint8_t* data;
  size_t size;
};

// The chunks in [p, end), each padded to an even size.
std::vector<Chunk> chunks(const uint8_t* p, const uint8_t* end, std::string_view name, std::string_view where) {
  std::vector<Chunk> out;
  while (p < end) {
    check(end - p >= 8, kCtx, name, ": truncated chunk header in ", where);
    const size_t n = rd32(p + 4);
    check(n <= size_t(end - p) - 8, kCtx, name, ": chunk '", std::string_view(reinterpret_cast<const char*>(p), 4),
          "' in ", where, " claims ", n, " bytes, only ", size_t(end - p) - 8, " left");
    out.push_back({std::string_view(reinterpret_cast<const char*>(p), 4), p + 8, n});
    p += 8 + n;
    if ((n & 1) && p < end) ++p;
  }
  return out;
}

// Frame data inside ANMF (or the whole simple file): optional ALPH, then VP8 / VP8L.
void take_bitstream(const std::vector<Chunk>& cs, WebpFrame* f, std::string_view name, std::string_view where) {
  for (const Chunk& c : cs) {
    if (c.fourcc == "ALPH") {
      f->alph.assign(c.data, c.data + c.size);
    } else if (c.fourcc == "VP8 " || c.fourcc == "VP8L") {
      f->bitstream.assign(c.data, c.data + c.size);
      f->lossless = c.fourcc == "VP8L";
      return;
    }
  }
  fail(kCtx, name, ": no VP8 / VP8L image data in ", where);
}

// Width and height from a VP8 / VP8L bitstream's own header.
void bitstream_size(const WebpFrame& f, int* w, int* h, std::string_view name) {
  const std::vector<uint8_t>& b = f.bitstream;
  if (f.lossless) {
    check(b.size() >= 5 && b[0] == 0x2f, kCtx, name, ": bad VP8L header");
    const uint32_t bits = rd32(b.data() + 1);
    *w = int(bits & 0x3fff) + 1;
    *h = int((bits >> 14) & 0x3fff) + 1;
  } else {
    check(b.size() >= 10 && b[3] == 0x9d && b[4] == 0x01 && b[5] == 0x2a, kCtx, name, ": bad VP8 key frame header");
    *w = int((b[6] | b[7] << 8) & 0x3fff);
    *h = int((b[8] | b[9] << 8) & 0x3fff);
  }
}

}  // namespace

WebpContainer parse_webp_container(const uint8_t* data, size_t size, std::string_view name) {
  check(size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0, kCtx, name,
        " is not a WebP file");
  const size_t riff = rd32(data + 4);
  check(riff >= 4 && riff <= size - 8, kCtx, name, ": RIFF size ", riff, " does not fit the file's ", size,
        " bytes");
  const std::vector<Chunk> top = chunks(data + 12, data + 8 + riff, name, "the file");
  check(!top.empty(), kCtx, name, ": no chunks");
  WebpContainer wc;
  if (top[0].fourcc != "VP8X") {  // simple file: one image
    WebpFrame f;
    take_bitstream(top, &f, name, "the file");
    bitstream_size(f, &f.width, &f.height, name);
    wc.canvas_width = f.width;
    wc.canvas_height = f.height;
    wc.frames.push_back(std::move(f));
    return wc;
  }
  check(top[0].size >= 10, kCtx, name, ": VP8X chunk too short");
  const uint8_t flags = top[0].data[0];
  wc.animated = flags & 0x02;
  wc.canvas_width = int(rd24(top[0].data + 4)) + 1;
  wc.canvas_height = int(rd24(top[0].data + 7)) + 1;
  check(wc.canvas_width <= kMaxSide && wc.canvas_height <= kMaxSide, kCtx, name, ": canvas ", wc.canvas_width,
        "x", wc.canvas_height, " is larger than ", kMaxSide);
  for (const Chunk& c : top)
    if (c.fourcc == "XMP ") wc.xmp.assign(reinterpret_cast<const char*>(c.data), c.size);
  if (!wc.animated) {
    WebpFrame f;
    take_bitstream(top, &f, name, "the file");
    f.width = wc.canvas_width;
    f.height = wc.canvas_height;
    wc.frames.push_back(std::move(f));
  } else {
    for (const Chunk& c : top) {
      if (c.fourcc == "ANIM") {
        check(c.size >= 6, kCtx, name, ": ANIM chunk too short");
        wc.loop_count = int(c.data[4] | c.data[5] << 8);
      } else if (c.fourcc == "ANMF") {
        const std::string where = cat("frame ", wc.frames.size());
        check(c.size >= 16, kCtx, name, ": ANMF chunk of ", where, " too short");
        WebpFrame f;
        f.x = int(rd24(c.data)) * 2;
        f.y = int(rd24(c.data + 3)) * 2;
        f.width = int(rd24(c.data + 6)) + 1;
        f.height = int(rd24(c.data + 9)) + 1;
        f.duration_ms = int(rd24(c.data + 12));
        f.blend = !(c.data[15] & 0x02);
        f.dispose = c.data[15] & 0x01;
        check(f.x + f.width <= wc.canvas_width && f.y + f.height <= wc.canvas_height, kCtx, name, ": ", where,
              " (", f.width, "x", f.height, " at ", f.x, ",", f.y, ") lies outside the ", wc.canvas_width, "x",
              wc.canvas_height, " canvas");
        take_bitstream(chunks(c.data + 16, c.data + c.size, name, where), &f, name, where);
        wc.frames.push_back(std::move(f));
      }
    }
    check(!wc.frames.empty(), kCtx, name, ": animated WebP without frames (no ANMF chunk)");
  }
  for (size_t i = 0; i < wc.frames.size(); ++i) {
    WebpFrame& f = wc.frames[i];
    int w = 0, h = 0;
    bitstream_size(f, &w, &h, name);
    check(w == f.width && h == f.height, kCtx, name, ": frame ", i, " header says ", f.width, "x", f.height,
          ", its bitstream ", w, "x", h);
  }
  return wc;
}

std::vector<uint8_t> standalone_webp(const WebpFrame& f) {
  std::vector<uint8_t> out = {'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'};
  auto chunk = [&out](const char* fourcc, const std::vector<uint8_t>& payload) {
    out.insert(out.end(), fourcc, fourcc + 4);
    wr32(out, uint32_t(payload.size()));
    out.insert(out.end(), payload.begin(), payload.end());
    if (payload.size() & 1) out.push_back(0);
  };
  if (!f.alph.empty() && !f.lossless) {  // VP8L carries its own alpha
    std::vector<uint8_t> vp8x = {0x10, 0, 0, 0};  // flags: alpha
    wr24(vp8x, uint32_t(f.width - 1));
    wr24(vp8x, uint32_t(f.height - 1));
    chunk("VP8X", vp8x);
    chunk("ALPH", f.alph);
  }
  chunk(f.lossless ? "VP8L" : "VP8 ", f.bitstream);
  const uint32_t riff = uint32_t(out.size() - 8);
  std::memcpy(out.data() + 4, &riff, 4);  // little-endian hosts (x86-64, aarch64)
  return out;
}

}  // namespace diffq::io
