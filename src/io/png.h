// PNG output of generated images (libpng), with the generation parameters in text chunks, and the
// float -> uint8 conversion of Diffusers' VaeImageProcessor.
//
// Files are written atomically: the encoded bytes go to a temporary file in the same directory, are
// fsynced, then renamed over the target; on any failure the temporary is removed, the target is left
// untouched, and diffq::Error("[png] ...") names the path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::io {

// Key/value text chunks in file order. Keys: 1-79 printable Latin-1 characters (ASCII here). Values
// that are plain ASCII are written as tEXt, others (UTF-8) as uncompressed iTXt.
using PngText = std::vector<std::pair<std::string, std::string>>;

struct PngImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3, row-major, RGB interleaved
  PngText text;              // tEXt / zTXt / iTXt chunks in file order
};

// Encodes 8-bit RGB pixels (row-major HWC) to PNG bytes.
std::vector<uint8_t> encode_png(const uint8_t* rgb, int64_t width, int64_t height,
                                const PngText& text = {});
// Writes `path` atomically (see above).
void write_png(const std::filesystem::path& path, const uint8_t* rgb, int64_t width, int64_t height,
               const PngText& text = {});
// `image`: uint8 [H, W, 3] or [1, H, W, 3] (any layout).
void write_png(const std::filesystem::path& path, const Tensor& image, const PngText& text = {});

// Decodes any PNG to 8-bit RGB (palette/gray expanded, 16-bit reduced, alpha dropped) plus its text.
PngImage decode_png(const uint8_t* data, size_t size, std::string_view name);
PngImage read_png(const std::filesystem::path& path);

// Diffusers' postprocess of a VAE output [B, C, H, W] (float32/bf16/f16): clamp(x / 2 + 0.5, 0, 1)
// computed in x's dtype, then permuted to [B, H, W, C] float32 (what output_type="np" returns).
Tensor denormalize_image(const Tensor& vae_output);

// numpy's (images * 255).round().astype(uint8) on a float32 [..] tensor in [0, 1]: the product in
// float32, rounded half to even. Returns a uint8 tensor of the same shape.
Tensor image_to_uint8(const Tensor& images);
uint8_t float_to_uint8(float x);

}  // namespace diffq::io
