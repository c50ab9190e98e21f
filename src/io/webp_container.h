// The RIFF layer of WebP files (Google's "WebP Container Specification"): simple files (one VP8 / VP8L
// chunk) and extended ones (VP8X, with ANIM + ANMF frames, ALPH, XMP). Only the container: the frames'
// bitstreams are handed to libavcodec's WebP decoder as standalone files (standalone_webp), because
// FFmpeg 5.1 (Debian 12) reads no animated WebP. Bounds-checked: a corrupt file is an error, never a
// read past the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace diffq::io {

struct WebpFrame {
  int x = 0, y = 0, width = 0, height = 0;  // the frame's rectangle on the canvas
  int duration_ms = 0;
  bool blend = false;    // alpha-blend onto the canvas (else overwrite)
  bool dispose = false;  // clear the rectangle to transparent after showing it
  std::vector<uint8_t> alph;       // ALPH chunk payload ("" when none)
  std::vector<uint8_t> bitstream;  // VP8 or VP8L chunk payload
  bool lossless = false;           // VP8L
};

struct WebpContainer {
  int canvas_width = 0, canvas_height = 0;
  bool animated = false;
  int loop_count = 0;  // ANIM: 0 = forever
  std::string xmp;     // "XMP " chunk, when present
  std::vector<WebpFrame> frames;
};

WebpContainer parse_webp_container(const uint8_t* data, size_t size, std::string_view name);

// A single-image WebP file holding `f` (VP8X + ALPH + VP8 when it has alpha, else VP8 / VP8L alone).
std::vector<uint8_t> standalone_webp(const WebpFrame& f);

}  // namespace diffq::io
