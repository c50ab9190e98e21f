// Row ops on CUDA: softmax (any dim), layer_norm and rms_norm (last dim), rope and reduce (sum, mean,
// max over any dims). Inputs are any strided views of float32/float16/bfloat16 (mixed dtypes for the
// optional weights), math in f32 with row statistics accumulated in f64, one rounding to the output
// dtype: the formulas of the CPU backend (src/backend/cpu/norm.cpp, softmax.cpp, rope.cpp,
// reduce.cpp), which is the reference tests/cuda/test_cuda_op_table.cpp holds these to. reduce also
// takes integer inputs (int8, uint8, int32, int64, bool) as the CPU: sum and max exact in int64 (the
// sum wraps), mean = double(sum) / count, each stored into x's dtype (convert_int.cuh).
// One block per row (output element for reduce); threads stride over the row.
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/convert.cuh"
#include "backend/cuda/convert_int.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;  // a multiple of 32, at most 1024

// Sum of v over the block (every thread gets the result).
__device__ double block_sum(double v) {
  __shared__ double part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  double s = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) s += part[w];
  return s;
}

// Max of v over the block; NaN when any thread's v is NaN.
__device__ float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = (isnan(v) || isnan(u)) ? NAN : fmaxf(v, u);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float m = part[0];
  for (int w = 1; w < int(blockDim.x >> 5); ++w) m = (isnan(m) || isnan(part[w])) ? NAN : fmaxf(m, part[w]);
  return m;
}

struct In {
  const void* data = nullptr;  // nullptr: absent optional input
  StridedView view;
  DType dtype = DType::f32;

  __device__ __forceinline__ float at(int64_t linear) const { return load_f32(data, dtype, view.offset_of(linear)); }
};

In input_of(const Tensor& t, const Shape& shape, const char* ctx) {
  In in;
  if (!t.defined()) return in;
  check(is_kernel_float(t.dtype()), ctx, "cuda: ", t.str(), " is not supported yet (float32, float16, bfloat16 are)");
  in.data = t.data_ptr();
  in.view = make_views(shape, {&t}, ctx)[0];
  in.dtype = t.dtype();
  return in;
}

Tensor optional(const OpCall& c, size_t i) { return c.inputs.size() > i ? c.inputs[i] : Tensor(); }

void check_out(const Tensor& out, const char* ctx) {
  check(is_kernel_float(out.dtype()), ctx, "cuda: output ", out.str(), " is not supported yet");
}

unsigned blocks_for(int64_t rows) { return unsigned(rows < 65535 ? (rows < 1 ? 1 : rows) : 65535); }

// ---- layer_norm / rms_norm: x viewed as [rows, n] ----
__global__ void row_norm_kernel(In x, In w, In b, void* out, DType ot, int64_t rows, int64_t n, double eps,
                                bool rms) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    float mean = 0.0f;
    if (!rms) {
      double s = 0;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += x.at(base + j);
      mean = float(block_sum(s) / double(n));
    }
    double q = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double d = double(x.at(base + j) - mean);
      q += d * d;
    }
    const float rstd = float(1.0 / sqrt(block_sum(q) / double(n) + eps));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float v = __fmul_rn(x.at(base + j) - mean, rstd);
      if (w.data) v = __fmul_rn(v, w.at(j));
      if (b.data) v = __fadd_rn(v, b.at(j));
      store_f32(out, ot, base + j, v);
    }
  }
}

void row_norm(const OpCall& c, Tensor& out, bool rms, const char* name) {
  const Tensor& x = c.inputs[0];
  check_out(out, name);
  const int64_t n = x.dim() ? x.size(-1) : 1, rows = n ? x.numel() / n : 0;
  if (rows == 0 || n == 0) return;
  const In xi = input_of(x, x.shape(), name);
  const In wi = input_of(optional(c, 1), {n}, name);
  const In bi = rms ? In{} : input_of(optional(c, 2), {n}, name);
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  row_norm_kernel<<<blocks_for(rows), kThreads, 0, current_stream()>>>(xi, wi, bi, out.data_ptr(), out.dtype(), rows, n,
                                                  c.attrs.f0, rms);
  check_cuda(cudaGetLastError(), std::string(name) + ": kernel launch", idx);
}

void layer_norm(const OpCall& c, Tensor& out) { row_norm(c, out, false, "layer_norm"); }
void rms_norm(const OpCall& c, Tensor& out) { row_norm(c, out, true, "rms_norm"); }

// ---- softmax: x and out permuted so the softmax dim is last, viewed as [rows, n] ----
__global__ void softmax_kernel(In x, In o, void* out, DType ot, int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, x.at(base + j));
    m = block_max(m);
    if (m == -INFINITY) m = 0.0f;  // all -inf: 0/0 = NaN, as torch
    double s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += double(expf(x.at(base + j) - m));
    const float inv = 1.0f / float(block_sum(s));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      store_f32(out, ot, o.view.offset_of(base + j), __fmul_rn(expf(x.at(base + j) - m), inv));
  }
}

void softmax(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  check_out(out, "softmax");
  if (x.numel() == 0) return;
  const int64_t rank = x.dim() ? x.dim() : 1;
  const int64_t dim = c.attrs.i0 < 0 ? c.attrs.i0 + rank : c.attrs.i0;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) perm.push_back(d);
  if (x.dim()) perm.push_back(dim);
  const Tensor xp = x.dim() ? x.permute(perm) : x, op = out.dim() ? out.permute(perm) : out;
  const int64_t n = x.dim() ? x.size(dim) : 1, rows = x.numel() / n;
  const std::vector<StridedView> v = make_views(xp.shape(), {&xp, &op}, "softmax");
  In xi;
  xi.data = x.data_ptr();
  xi.view = v[0];
  xi.dtype = x.dtype();
  check(is_kernel_float(x.dtype()), "softmax", "cuda: ", x.str(), " is not supported yet");
  In oi;
  oi.view = v[1];
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  softmax_kernel<<<blocks_for(rows), kThreads, 0, current_stream()>>>(xi, oi, out.data_ptr(), out.dtype(), rows, n);
  check_cuda(cudaGetLastError(), "softmax: kernel launch", idx);
}

// ---- rope: x[B, S, H, D] (any view), cos/sin [S, D], interleaved pairs ----
__global__ void rope_kernel(In x, In cs, In sn, void* out, DType ot, int64_t S, int64_t H, int64_t D,
                            int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = i % D, s = (i / (D * H)) % S, t = s * D + d;
    const float xv = x.at(i);
    const float y = (d & 1) ? __fadd_rn(__fmul_rn(xv, cs.at(t)), __fmul_rn(x.at(i - 1), sn.at(t)))
                            : __fsub_rn(__fmul_rn(xv, cs.at(t)), __fmul_rn(x.at(i + 1), sn.at(t)));
    store_f32(out, ot, i, y);
  }
}

void rope(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  check_out(out, "rope");
  const int64_t S = x.size(1), H = x.size(2), D = x.size(3), n = x.numel();
  if (n == 0) return;
  const In xi = input_of(x, x.shape(), "rope");
  const In ci = input_of(c.inputs[1], {S, D}, "rope"), si = input_of(c.inputs[2], {S, D}, "rope");
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(xi, ci, si, out.data_ptr(), out.dtype(), S, H, D, n);
  check_cuda(cudaGetLastError(), "rope: kernel launch", idx);
}

// ---- reduce: x permuted to [kept..., reduced...], viewed as [nout, R] ----
__global__ void reduce_kernel(In x, void* out, DType ot, int64_t nout, int64_t R, ops::ReduceFn fn) {
  for (int64_t o = blockIdx.x; o < nout; o += gridDim.x) {
    const int64_t base = o * R;
    float result;
    if (fn == ops::ReduceFn::max) {
      float m = -INFINITY;
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x) {
        const float v = x.at(base + j);
        m = (isnan(m) || isnan(v)) ? NAN : fmaxf(m, v);
      }
      result = block_max(m);
    } else {
      double s = 0;
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x) s += x.at(base + j);
      s = block_sum(s);
      if (fn == ops::ReduceFn::mean) s /= double(R);
      result = float(s);
    }
    if (threadIdx.x == 0) store_f32(out, ot, o, result);
  }
}

// Integer x: the same walk with exact int64 accumulation.
__global__ void reduce_int_kernel(const void* x, StridedView v, DType xt, void* out, DType ot, int64_t nout,
                                  int64_t R, ops::ReduceFn fn) {
  for (int64_t o = blockIdx.x; o < nout; o += gridDim.x) {
    const int64_t base = o * R;
    int64_t acc;
    if (fn == ops::ReduceFn::max) {
      acc = INT64_MIN;
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x) {
        const int64_t e = load_i64(x, xt, v.offset_of(base + j));
        acc = e > acc ? e : acc;
      }
      acc = block_max_i64(acc);
    } else {
      uint64_t s = 0;
      for (int64_t j = threadIdx.x; j < R; j += blockDim.x) s += uint64_t(load_i64(x, xt, v.offset_of(base + j)));
      acc = block_sum_i64(int64_t(s));
    }
    if (threadIdx.x == 0) {
      if (fn == ops::ReduceFn::mean) store_from_f64(out, ot, o, double(acc) / double(R));
      else store_i64(out, ot, o, acc);
    }
  }
}

void reduce(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const auto fn = ops::ReduceFn(c.attrs.i0);
  check(c.attrs.i0 >= 0 && c.attrs.i0 <= int64_t(ops::ReduceFn::max), "reduce", "unknown function ", c.attrs.i0);
  const bool integer = is_kernel_int(x.dtype());
  check(integer || is_kernel_float(x.dtype()), "reduce", "cuda: ", x.str(),
        " is not supported (float32, float16, bfloat16, int8, uint8, int32, int64, bool are)");
  if (integer)
    check(out.dtype() == x.dtype(), "reduce", "cuda: output ", out.str(), " must have the dtype of ", x.str());
  else
    check_out(out, "reduce");
  std::vector<bool> red(size_t(x.dim()), c.attrs.ints.empty());
  for (int64_t d : c.attrs.ints) red[size_t(d < 0 ? d + x.dim() : d)] = true;
  std::vector<int64_t> perm;
  int64_t R = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!red[size_t(d)]) perm.push_back(d);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (red[size_t(d)]) {
      perm.push_back(d);
      R *= x.size(d);
    }
  const int64_t nout = out.numel();
  if (nout == 0) return;
  check(R > 0, "reduce", "cuda: reducing an empty dim of ", x.str(), " is not supported");
  const Tensor xp = x.dim() ? x.permute(perm) : x;
  const int idx = out.device().index;
  if (integer) {
    const StridedView v = make_views(xp.shape(), {&xp}, "reduce")[0];
    DeviceGuard guard(idx);
    reduce_int_kernel<<<blocks_for(nout), kThreads, 0, current_stream()>>>(xp.data_ptr(), v, x.dtype(), out.data_ptr(), out.dtype(),
                                                      nout, R, fn);
    check_cuda(cudaGetLastError(), "reduce: kernel launch", idx);
    return;
  }
  const In xi = input_of(xp, xp.shape(), "reduce");
  DeviceGuard guard(idx);
  reduce_kernel<<<blocks_for(nout), kThreads, 0, current_stream()>>>(xi, out.data_ptr(), out.dtype(), nout, R, fn);
  check_cuda(cudaGetLastError(), "reduce: kernel launch", idx);
}

}  // namespace

void register_norm_kernels() {
  ops::register_kernel(OpKind::layer_norm, DeviceKind::cuda, layer_norm);
  ops::register_kernel(OpKind::rms_norm, DeviceKind::cuda, rms_norm);
  ops::register_kernel(OpKind::softmax, DeviceKind::cuda, softmax);
  ops::register_kernel(OpKind::rope, DeviceKind::cuda, rope);
  ops::register_kernel(OpKind::reduce, DeviceKind::cuda, reduce);
}

}  // namespace diffq::backend::cuda
