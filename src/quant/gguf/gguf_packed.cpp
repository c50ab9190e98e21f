#include "quant/gguf/gguf_packed.h"

#include <cstring>

#include "diffq/error.h"

namespace diffq::quant::gguf {

namespace {
constexpr const char* kCtx = "gguf";

const io::GGMLTypeInfo& info_of(const PackedTensor& t, std::string_view what) {
  const io::GGMLTypeInfo* i = io::ggml_type_info(t.type);
  check(i != nullptr, kCtx, what, " has unknown ggml type ", t.type);
  return *i;
}

// Elements per row (dim 0) and the number of rows; a 1-D tensor has rows of one element.
std::pair<int64_t, int64_t> rows_of(const PackedTensor& t, std::string_view what) {
  check(!t.shape.empty(), kCtx, what, " is a scalar; row operations need at least one dim");
  return {t.shape[0], shape_numel(t.shape) / std::max<int64_t>(t.shape[0], 1)};
}

// Byte offset of row r; throws when that is inside a block.
int64_t row_offset(const PackedTensor& t, int64_t r, std::string_view what) {
  const auto& info = info_of(t, what);
  const auto [n_rows, row_elems] = rows_of(t, what);
  const int64_t e = r * row_elems;
  check(e % info.block_size == 0, kCtx, what, " (", info.name, ", shape ", shape_str(t.shape), ") cannot be split at row ",
        r, ": element ", e, " is inside a block of ", info.block_size, " (a split must fall on a block-row boundary)");
  return e / info.block_size * info.type_size;
}
}  // namespace

PackedTensor packed_rows(const PackedTensor& t, int64_t r0, int64_t r1, std::string_view what) {
  const auto [n_rows, row_elems] = rows_of(t, what);
  check(0 <= r0 && r0 <= r1 && r1 <= n_rows, kCtx, what, ": rows [", r0, ", ", r1, ") out of range for ", n_rows, " rows");
  const int64_t b0 = row_offset(t, r0, what), b1 = row_offset(t, r1, what);
  Shape s = t.shape;
  s[0] = r1 - r0;
  return PackedTensor{t.type, std::move(s), t.bytes.slice(0, b0, b1)};
}

PackedTensor packed_concat(const std::vector<PackedTensor>& parts, std::string_view what) {
  check(!parts.empty(), kCtx, what, ": nothing to concatenate");
  const PackedTensor& first = parts[0];
  const auto& info = info_of(first, what);
  Shape s = first.shape;
  s[0] = 0;
  int64_t bytes = 0;
  for (const auto& p : parts) {
    const auto& pi = info_of(p, what);
    check(p.type == first.type, kCtx, what, ": parts of types ", info.name, " and ", pi.name,
          " cannot be fused into one tensor");
    check(p.shape.size() == first.shape.size() &&
              std::equal(p.shape.begin() + 1, p.shape.end(), first.shape.begin() + 1),
          kCtx, what, ": parts of shapes ", shape_str(first.shape), " and ", shape_str(p.shape), " cannot be stacked");
    row_offset(p, p.shape[0], what);  // the part ends on a block boundary
    s[0] += p.shape[0];
    bytes += p.bytes.numel();
  }
  Tensor out = Tensor::empty({bytes}, DType::u8);
  auto* dst = out.data<uint8_t>();
  for (const auto& p : parts) {
    const Tensor b = p.bytes.contiguous();
    std::memcpy(dst, b.data_ptr(), size_t(b.numel()));
    dst += b.numel();
  }
  return PackedTensor{first.type, std::move(s), std::move(out)};
}

PackedTensor packed_swap_halves(const PackedTensor& t, std::string_view what) {
  const auto [n_rows, row_elems] = rows_of(t, what);
  check(n_rows % 2 == 0, kCtx, what, " has an odd row count ", n_rows, "; its halves cannot be swapped");
  const int64_t h = n_rows / 2;
  return packed_concat({packed_rows(t, h, n_rows, what), packed_rows(t, 0, h, what)}, what);
}

PackedTensor packed_quantize(const Tensor& dense, GGMLType type, std::string_view what) {
  const TypeTraits* tr = find_type(type);
  check(tr != nullptr, kCtx, what, ": ggml type ", uint32_t(type), " is not supported");
  check(dense.dim() >= 1, kCtx, what, " is a scalar; GGUF stores tensors of 1 to 4 dims");
  check(is_floating(dense.dtype()), kCtx, what, " is ", dtype_name(dense.dtype()), "; only float tensors are quantized");
  const int64_t K = dense.shape().back();
  check(K % tr->block_size() == 0, kCtx, what, " (shape ", shape_str(dense.shape()), ") has rows of ", K,
        " elements, not a multiple of the ", tr->name(), " block size ", tr->block_size());
  const Tensor f = dense.to(Device::cpu()).to(DType::f32).contiguous();
  const int64_t rows = K == 0 ? 0 : f.numel() / K, rb = tr->row_bytes(K);
  Tensor out = Tensor::empty({rows * rb}, DType::u8);
  tr->quantize_rows(f.data<float>(), rows, K, out.data<uint8_t>());
  return PackedTensor{uint32_t(type), dense.shape(), std::move(out)};
}

Tensor packed_dequantize(const PackedTensor& t, std::string_view what) {
  const TypeTraits& tr = type_or_throw(t.type, what);
  const int64_t n = shape_numel(t.shape);
  const int64_t want = n / tr.block_size() * tr.type_size();
  check(n % tr.block_size() == 0 && t.bytes.numel() == want, kCtx, what, " (", tr.name(), ", shape ",
        shape_str(t.shape), ") has ", t.bytes.numel(), " bytes, ", want, " expected");
  Tensor out = Tensor::empty(t.shape, DType::f32);
  const Tensor b = t.bytes.contiguous();
  tr.dequantize_ref(b.data_ptr(), out.data<float>(), n);
  return out;
}

Tensor packed_as_dense(const PackedTensor& t) {
  DType d;
  if (t.type == uint32_t(GGMLType::F32)) d = DType::f32;
  else if (t.type == uint32_t(GGMLType::F16)) d = DType::f16;
  else if (t.type == uint32_t(GGMLType::BF16)) d = DType::bf16;
  else return {};
  const Tensor b = t.bytes.is_contiguous() && t.bytes.offset() % int64_t(dtype_size(d)) == 0 ? t.bytes : t.bytes.clone();
  check(b.numel() == shape_numel(t.shape) * int64_t(dtype_size(d)), kCtx, "dense GGUF tensor of shape ",
        shape_str(t.shape), " has ", b.numel(), " bytes");
  return Tensor(b.storage(), t.shape, contiguous_strides(t.shape), b.offset() / int64_t(dtype_size(d)), d);
}

}  // namespace diffq::quant::gguf
