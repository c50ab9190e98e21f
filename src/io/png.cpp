#include "io/png.h"

#include <png.h>

#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "diffq/error.h"
#include "io/atomic_file.h"

namespace diffq::io {

namespace {

constexpr const char* kCtx = "png";

// libpng reports errors through this callback; it must not return (longjmp back to the caller).
struct PngErrorState {
  char message[512] = {0};
};

void on_png_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngErrorState*>(png_get_error_ptr(png));
  if (st) std::snprintf(st->message, sizeof st->message, "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}
void on_png_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void on_flush(png_structp) {}

struct ReadCursor {
  const uint8_t* data;
  size_t size, pos;
};
void on_read(png_structp png, png_bytep dst, size_t n) {
  auto* c = static_cast<ReadCursor*>(png_get_io_ptr(png));
  if (n > c->size - c->pos) png_error(png, "unexpected end of data");
  std::memcpy(dst, c->data + c->pos, n);
  c->pos += n;
}

bool is_ascii(const std::string& s) {
  for (unsigned char ch : s)
    if (ch >= 0x80 || ch == 0) return false;
  return true;
}

void check_key(const std::string& key) {
  check(!key.empty() && key.size() <= 79, kCtx, "text key \"", key, "\" must have 1 to 79 characters");
  for (unsigned char ch : key)
    check(ch >= 0x20 && ch < 0x7f, kCtx, "text key \"", key, "\" must be printable ASCII");
  check(key.front() != ' ' && key.back() != ' ' && key.find("  ") == std::string::npos, kCtx,
        "text key \"", key, "\" has leading, trailing or doubled spaces");
}

// The libpng part of encoding; only C objects live across setjmp (C++ ones belong to the caller). Returns false with st->message set.
bool encode_raw(const uint8_t* rgb, png_uint_32 w, png_uint_32 h, png_text* texts, int ntext,
                std::vector<uint8_t>* out, PngErrorState* st) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, st, on_png_error, on_png_warning);
  if (!png) {
    std::snprintf(st->message, sizeof st->message, "png_create_write_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    if (!info) std::snprintf(st->message, sizeof st->message, "png_create_info_struct failed");
    png_destroy_write_struct(&png, info ? &info : nullptr);
    return false;
  }
  png_set_write_fn(png, out, on_write, on_flush);
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (ntext > 0) png_set_text(png, info, texts, ntext);
  png_write_info(png, info);
  for (png_uint_32 y = 0; y < h; ++y)
    png_write_row(png, const_cast<png_bytep>(rgb + size_t(y) * w * 3));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

// What decode_raw fills in. The row pointers live here, in the caller's frame, not in decode_raw's:
// libpng's error longjmp back to decode_raw's setjmp skips the destructors of C++ objects made in that
// frame after setjmp (undefined behaviour; a std::vector there leaked on every corrupt image).
struct DecodedRaw {
  png_uint_32 w = 0, h = 0;
  std::vector<png_bytep> rows;
};

bool decode_raw(ReadCursor* cur, std::vector<uint8_t>* pixels, PngText* text, DecodedRaw* dims,
                PngErrorState* st) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, st, on_png_error, on_png_warning);
  if (!png) {
    std::snprintf(st->message, sizeof st->message, "png_create_read_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  png_infop end = info ? png_create_info_struct(png) : nullptr;
  if (!info || !end || setjmp(png_jmpbuf(png))) {
    if (!info || !end) std::snprintf(st->message, sizeof st->message, "png_create_info_struct failed");
    png_destroy_read_struct(&png, info ? &info : nullptr, end ? &end : nullptr);
    return false;
  }
  png_set_read_fn(png, cur, on_read);
  png_set_user_limits(png, 1u << 16, 1u << 16);
  png_read_info(png, info);
  png_set_expand(png);  // palette -> RGB, gray < 8 bit -> 8 bit, tRNS -> alpha
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  dims->w = png_get_image_width(png, info);
  dims->h = png_get_image_height(png, info);
  if (png_get_rowbytes(png, info) != size_t(dims->w) * 3) png_error(png, "unexpected row layout");
  pixels->resize(size_t(dims->w) * dims->h * 3);
  dims->rows.resize(dims->h);
  for (png_uint_32 y = 0; y < dims->h; ++y) dims->rows[y] = pixels->data() + size_t(y) * dims->w * 3;
  png_read_image(png, dims->rows.data());
  png_read_end(png, end);
  for (png_infop in : {info, end}) {
    png_textp t = nullptr;
    int n = 0;
    png_get_text(png, in, &t, &n);
    for (int i = 0; i < n; ++i)
      text->emplace_back(t[i].key, std::string(t[i].text, t[i].text_length ? t[i].text_length
                                                                           : t[i].itxt_length));
  }
  png_destroy_read_struct(&png, &info, &end);
  return true;
}


}  // namespace

std::vector<uint8_t> encode_png(const uint8_t* rgb, int64_t width, int64_t height,
                                const PngText& text) {
  check(width > 0 && height > 0 && width <= (1 << 24) && height <= (1 << 24), kCtx,
        "invalid image size ", width, "x", height);
  check(rgb != nullptr, kCtx, "no pixel data");
  std::vector<png_text> chunks(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& [k, v] = text[i];
    check_key(k);
    png_text& t = chunks[i];
    std::memset(&t, 0, sizeof t);
    t.key = const_cast<char*>(k.c_str());
    t.text = const_cast<char*>(v.c_str());
    if (is_ascii(v)) {
      t.compression = PNG_TEXT_COMPRESSION_NONE;
      t.text_length = v.size();
    } else {
      t.compression = PNG_ITXT_COMPRESSION_NONE;
      t.itxt_length = v.size();
      t.lang = const_cast<char*>("");
      t.lang_key = const_cast<char*>("");
    }
  }
  std::vector<uint8_t> out;
  PngErrorState st;
  if (!encode_raw(rgb, png_uint_32(width), png_uint_32(height), chunks.data(), int(chunks.size()),
                  &out, &st))
    fail(kCtx, "encoding a ", width, "x", height, " image failed: ", st.message);
  return out;
}

void write_png(const std::filesystem::path& path, const uint8_t* rgb, int64_t width, int64_t height,
               const PngText& text) {
  std::vector<uint8_t> bytes;
  try {
    bytes = encode_png(rgb, width, height, text);
  } catch (const Error& e) {
    fail(kCtx, "cannot write ", path.string(), ": ", e.what());
  }
  io::write_file_atomically(path, kCtx, [&](const io::ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

void write_png(const std::filesystem::path& path, const Tensor& image, const PngText& text) {
  check(image.dtype() == DType::u8, kCtx, "cannot write ", path.string(), ": image must be uint8, got ",
        image.str());
  Tensor im = image;
  if (im.dim() == 4) {
    check(im.size(0) == 1, kCtx, "cannot write ", path.string(), ": one image expected, got ", im.str());
    im = im.select(0, 0);
  }
  check(im.dim() == 3 && im.size(2) == 3, kCtx, "cannot write ", path.string(),
        ": expected [H, W, 3], got ", im.str());
  Tensor c = im.contiguous();
  write_png(path, c.data<uint8_t>(), c.size(1), c.size(0), text);
}

PngImage decode_png(const uint8_t* data, size_t size, std::string_view name) {
  static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  check(size >= 8 && std::memcmp(data, kSig, 8) == 0, kCtx, name, " is not a PNG file");
  ReadCursor cur{data, size, 0};
  PngImage img;
  DecodedRaw dims;
  PngErrorState st;
  if (!decode_raw(&cur, &img.rgb, &img.text, &dims, &st)) fail(kCtx, name, ": ", st.message);
  img.width = dims.w;
  img.height = dims.h;
  return img;
}

PngImage read_png(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(bool(in), kCtx, "cannot open ", path.string());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return decode_png(bytes.data(), bytes.size(), path.string());
}

// ---- float image -> uint8 ----------------------------------------------------------------------------

Tensor denormalize_image(const Tensor& x) {
  const DType d = x.dtype();
  check(d == DType::f32 || d == DType::bf16 || d == DType::f16, kCtx,
        "image must be float32, bfloat16 or float16, got ", x.str());
  check(x.dim() == 4, kCtx, "expected a VAE output [B, C, H, W], got ", x.str());
  auto round_to = [d](std::vector<float> v) {
    if (d == DType::f32) return v;
    return Tensor::from_vector(v, {int64_t(v.size())}, d).to_f32_vector();
  };
  std::vector<float> v = x.to_f32_vector();
  for (float& e : v) e = e / 2.0f;
  v = round_to(std::move(v));
  for (float& e : v) e = e + 0.5f;
  v = round_to(std::move(v));
  for (float& e : v) e = std::isnan(e) ? e : std::fmin(std::fmax(e, 0.0f), 1.0f);
  return Tensor::from_vector(v, x.shape(), DType::f32).permute({0, 2, 3, 1}).contiguous();
}

uint8_t float_to_uint8(float x) {
  const float scaled = x * 255.0f;
  const float r = std::nearbyint(scaled);  // default rounding mode: half to even, as np.round
  if (!(r >= 0.0f)) return 0;  // NaN and negatives (numpy's cast is undefined there)
  return r >= 255.0f ? uint8_t(255) : uint8_t(r);
}

Tensor image_to_uint8(const Tensor& images) {
  check(images.dtype() == DType::f32, kCtx, "image_to_uint8 expects float32, got ", images.str());
  const std::vector<float> v = images.to_f32_vector();
  Tensor out = Tensor::empty(images.shape(), DType::u8);
  uint8_t* p = out.data<uint8_t>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = float_to_uint8(v[i]);
  return out;
}

}  // namespace diffq::io
