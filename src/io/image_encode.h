// One still image to JPEG or WebP bytes in memory, through libavcodec's mjpeg / libwebp encoders (PNG has
// its own encoder in io/png.h). For servers that answer with image bytes rather than files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace diffq::io {

// rgb: height * width * 3 bytes, row-major RGB. format: "jpeg" (quality ~90, 4:2:0) or "webp" (quality 90).
std::vector<uint8_t> encode_still(const uint8_t* rgb, int64_t width, int64_t height, const std::string& format);

}  // namespace diffq::io
