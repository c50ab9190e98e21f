// Data movement ops that never convert values: upsample_nearest2x, concat, embedding. They copy
// elements of any dtype bytewise from any strided view into the contiguous output.
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backend/channels_last.h"
#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

namespace {

// n elements of `es` bytes, source stride ss and destination stride ds (in elements).
inline void copy_elems(const uint8_t* src, int64_t ss, uint8_t* dst, int64_t ds, int64_t n, size_t es) {
  if (ss == 1 && ds == 1) {
    std::memcpy(dst, src, size_t(n) * es);
    return;
  }
  switch (es) {
    case 1: for (int64_t i = 0; i < n; ++i) dst[i * ds] = src[i * ss]; return;
    case 2:
      for (int64_t i = 0; i < n; ++i)
        reinterpret_cast<uint16_t*>(dst)[i * ds] = reinterpret_cast<const uint16_t*>(src)[i * ss];
      return;
    case 4:
      for (int64_t i = 0; i < n; ++i)
        reinterpret_cast<uint32_t*>(dst)[i * ds] = reinterpret_cast<const uint32_t*>(src)[i * ss];
      return;
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * ds * int64_t(es), src + i * ss * int64_t(es), es);
  }
}

// One output row from input row src (unit stride, n elements): each element twice.
template <class T>
void double_row(const T* src, T* dst, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  constexpr int64_t V = 16 / sizeof(T);
  for (; i + V <= n; i += V) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i lo = sizeof(T) == 2 ? _mm_unpacklo_epi16(v, v) : _mm_unpacklo_epi32(v, v);
    const __m128i hi = sizeof(T) == 2 ? _mm_unpackhi_epi16(v, v) : _mm_unpackhi_epi32(v, v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i + V), hi);
  }
#endif
  for (; i < n; ++i) dst[2 * i] = dst[2 * i + 1] = src[i];
}

// Channels-last: x [N, H, W, C] -> [N, 2H, 2W, C]: each pixel's channels (a run of C elements) copied to
// two neighbouring output pixels, the second output row a copy of the first.
void upsample_channels_last(const Tensor& xin, Tensor& out) {
  const Tensor x = xin.is_contiguous() ? xin : xin.contiguous();
  const int64_t W = x.size(2);
  const size_t px = size_t(x.size(3)) * dtype_size(x.dtype()), in_row = size_t(W) * px, out_row = 2 * in_row;
  const auto* src = static_cast<const uint8_t*>(x.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  parallel_for(x.size(0) * x.size(1), std::max<int64_t>(1, int64_t(16384 / std::max<size_t>(out_row, 1))),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const uint8_t* s = src + size_t(r) * in_row;
                   uint8_t* d = dst + 2 * size_t(r) * out_row;
                   for (int64_t i = 0; i < W; ++i) {
                     std::memcpy(d + 2 * size_t(i) * px, s + size_t(i) * px, px);
                     std::memcpy(d + (2 * size_t(i) + 1) * px, s + size_t(i) * px, px);
                   }
                   std::memcpy(d + out_row, d, out_row);
                 }
               });
}

void upsample_kernel(const OpCall& c, Tensor& out) {
  if (is_channels_last(c)) return upsample_channels_last(c.inputs[0], out);
  const Tensor& x = c.inputs[0];
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3), Wo = 2 * W;
  const size_t es = dtype_size(x.dtype());
  const auto& st = x.strides();
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  // One input row per item: (n, c, y) -> output rows 2y and 2y + 1, each element twice (2- and 4-byte
  // elements in unit-stride rows by register interleaves), the second row a copy of the first.
  const int64_t row_bytes = Wo * int64_t(es);
  parallel_for(out.numel() / Wo / 2, std::max<int64_t>(1, 8192 / Wo), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t y = r % H, ch = (r / H) % C, n = r / (H * C);
      const uint8_t* src = elem_ptr(x, x.offset() + n * st[0] + ch * st[1] + y * st[2]);
      uint8_t* d = dst + 2 * r * row_bytes;
      if (st[3] == 1 && es == 2) {
        double_row(reinterpret_cast<const uint16_t*>(src), reinterpret_cast<uint16_t*>(d), W);
      } else if (st[3] == 1 && es == 4) {
        double_row(reinterpret_cast<const uint32_t*>(src), reinterpret_cast<uint32_t*>(d), W);
      } else {
        copy_elems(src, st[3], d, 2, W, es);                // even columns
        copy_elems(src, st[3], d + int64_t(es), 2, W, es);  // odd columns
      }
      std::memcpy(d + row_bytes, d, size_t(row_bytes));
    }
  });
}

void concat_kernel(const OpCall& c, Tensor& out) {
  const int64_t dim = wrap_dim(c.attrs.i0, out.dim(), "concat");
  const Shape ost = contiguous_strides(out.shape());
  const size_t es = dtype_size(out.dtype());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  int64_t at = 0;
  int64_t outer = 1;  // out [outer, out.size(dim), inner]
  for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
  const int64_t inner = out.size(dim) ? ost[size_t(dim)] : 0;
  for (const Tensor& t : c.inputs) {
    if (t.numel() > 0 && t.is_contiguous()) {
      // A contiguous input is `outer` runs of t.size(dim) * inner elements, each a run of out: copied in
      // pieces of up to 256 KiB over the threads (the Wan VAE's cache frames in front of a chunk).
      const int64_t run = t.size(dim) * inner * int64_t(es), piece = int64_t(256) << 10;
      const int64_t pieces = (run + piece - 1) / piece;
      const auto* src = static_cast<const uint8_t*>(t.data_ptr());
      const int64_t out_run = out.size(dim) * inner * int64_t(es), at_bytes = at * inner * int64_t(es);
      parallel_for(outer * pieces, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t o = i / pieces, b0 = (i % pieces) * piece, len = std::min(piece, run - b0);
          std::memcpy(dst + o * out_run + at_bytes + b0, src + o * run + b0, size_t(len));
        }
      });
    } else if (t.numel() > 0) {
      const RowIterator src_rows(t.shape(), t.strides()), dst_rows(t.shape(), ost);
      const int64_t len = src_rows.row_len(), base = at * ost[size_t(dim)];
      parallel_for(src_rows.num_rows(), std::max<int64_t>(1, 16384 / len), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          copy_elems(elem_ptr(t, t.offset() + src_rows.row_offset(r)), src_rows.row_stride(),
                     dst + (base + dst_rows.row_offset(r)) * int64_t(es), dst_rows.row_stride(), len, es);
      });
    }
    at += t.size(dim);
  }
}

void embedding_kernel(const OpCall& c, Tensor& out) {
  const Tensor &ids = c.inputs[0], &tab = c.inputs[1];
  const int64_t V = tab.size(0), D = tab.size(1);
  std::vector<int64_t> idv(size_t(ids.numel()));
  const RowIterator rows(ids.shape(), ids.strides());
  for (int64_t r = 0, k = 0; r < rows.num_rows(); ++r)
    for (int64_t i = 0; i < rows.row_len(); ++i, ++k) {
      const int64_t id = load_int(ids.storage()->data(), ids.dtype(),
                                  ids.offset() + rows.row_offset(r) + i * rows.row_stride());
      check(id >= 0 && id < V, "embedding", "id ", id, " at position ", k, " is outside the table [0, ", V, ")");
      idv[size_t(k)] = id;
    }
  const size_t es = dtype_size(tab.dtype());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  parallel_for(int64_t(idv.size()), std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      copy_elems(elem_ptr(tab, tab.offset() + idv[size_t(r)] * tab.strides()[0]), tab.strides()[1],
                 dst + r * D * int64_t(es), 1, D, es);
  });
}

}  // namespace

void register_layout_kernels() {
  ops::register_kernel(OpKind::upsample_nearest2x, DeviceKind::cpu, upsample_kernel);
  ops::register_kernel(OpKind::concat, DeviceKind::cpu, concat_kernel);
  ops::register_kernel(OpKind::embedding, DeviceKind::cpu, embedding_kernel);
}

}  // namespace diffq::backend::cpu
