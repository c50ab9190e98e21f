// scalar, clamp and unary on CUDA: one map kernel over any strided view of a float32/float16/bfloat16
// input, computed in f32 and rounded once to the output dtype (x's), with the CPU backend's formulas
// (src/backend/cpu/elementwise.cpp, unary.cpp): the CPU kernels are the scalar reference the tests
// hold these to (tests/cuda/test_cuda_op_table.cpp). scalar and clamp also take integer inputs
// (int8, uint8, int32, int64, bool; the output keeps x's dtype), with the CPU's integer semantics
// (src/backend/cpu/elementwise.cpp integer_map): add/mul/rsub of an integral scalar in exact int64 that
// wraps; anything else (a fractional scalar, pow, clamp) in double, stored truncated with saturation.
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/convert_int.cuh"
#include "backend/cuda/elementwise_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

using ops::ScalarFn;
using ops::UnaryFn;

constexpr int kThreads = 256;

enum class MapKind : int { scalar, clamp, unary };

struct MapOp {
  MapKind kind;
  int64_t fn;   // ScalarFn or UnaryFn
  float s;      // scalar (float(attrs.f0), as the CPU)
  float lo, hi; // clamp bounds
};

__device__ __forceinline__ float apply(const MapOp& op, float x) {
  switch (op.kind) {
    case MapKind::scalar: return apply_scalar(ScalarFn(op.fn), x, op.s);
    case MapKind::clamp: return x < op.lo ? op.lo : x > op.hi ? op.hi : x;  // NaN stays NaN
    case MapKind::unary: return apply_unary(UnaryFn(op.fn), x);
  }
  return 0.0f;
}

__global__ void map_kernel(const void* x, StridedView v, DType xt, void* out, DType ot, MapOp op,
                           int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store_f32(out, ot, i, apply(op, load_f32(x, xt, v.offset_of(i))));
}

// ---- integer inputs ----
enum class IntMapKind : int { exact, via_double, clamp };

struct IntMapOp {
  IntMapKind kind;
  ScalarFn fn;
  int64_t si;      // the integral scalar (exact)
  double s;        // the scalar as given (via_double)
  double lo, hi;   // clamp bounds
};

// |v|^e as the CPU's std::pow(double(v), e) gives it for an integer e >= 0: the exact power rounded
// once to double (exponentiation by squaring on the magnitude; a magnitude past 2^64 saturates any
// integer output, so it becomes infinity). The GPU's pow() may be off by an ulp, which a truncation to
// an integer would turn into an off-by-one (pow(3, 2) = 8.999...).
__device__ double int_pow(int64_t v, int64_t e) {
  const bool neg = v < 0 && (e & 1);
  unsigned long long base = v < 0 ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
  unsigned long long r = 1;
  bool overflow = false;
  for (; e > 0; e >>= 1) {
    if (e & 1) {
      overflow |= base != 0 && __umul64hi(r, base) != 0;
      r *= base;
    }
    if (e > 1) {
      overflow |= __umul64hi(base, base) != 0;
      base *= base;
    }
  }
  const double m = overflow ? INFINITY : __ull2double_rn(r);
  return neg ? -m : m;
}

__device__ __forceinline__ double via_double(ScalarFn fn, int64_t iv, double s) {
  const double v = double(iv);
  switch (fn) {
    case ScalarFn::add: return v + s;
    case ScalarFn::mul: return v * s;
    case ScalarFn::rsub: return s - v;
    case ScalarFn::pow:
      if (s >= 0 && s <= 9.0e15 && s == trunc(s)) return int_pow(iv, int64_t(s));
      if (s == 0.5) return sqrt(v);  // correctly rounded, as glibc's pow(v, 0.5)
      return pow(v, s);              // other exponents: CUDA's pow (within 2 ulp of glibc's)
  }
  return 0.0;
}

__global__ void int_map_kernel(const void* x, StridedView v, DType xt, void* out, DType ot, IntMapOp op,
                               int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t xv = load_i64(x, xt, v.offset_of(i));
    switch (op.kind) {
      case IntMapKind::exact: {
        const uint64_t a = uint64_t(xv), s = uint64_t(op.si);
        const uint64_t r = op.fn == ScalarFn::add ? a + s : op.fn == ScalarFn::mul ? a * s : s - a;
        store_i64(out, ot, i, int64_t(r));
        break;
      }
      case IntMapKind::via_double: store_from_f64(out, ot, i, via_double(op.fn, xv, op.s)); break;
      case IntMapKind::clamp: {
        // std::min(std::max(v, lo), hi) as on the CPU (a NaN bound leaves v as it is).
        double r = double(xv);
        r = r < op.lo ? op.lo : r;
        r = op.hi < r ? op.hi : r;
        store_from_f64(out, ot, i, r);
        break;
      }
    }
  }
}

void launch_int_map(const OpCall& c, Tensor& out, IntMapOp op, const char* name) {
  const Tensor& x = c.inputs[0];
  check(out.dtype() == x.dtype(), name, "cuda: output ", out.str(), " must have the dtype of ", x.str());
  const int64_t n = out.numel();
  if (n == 0) return;
  const std::vector<StridedView> v = make_views(out.shape(), {&x}, name);
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  int_map_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(x.data_ptr(), v[0], x.dtype(), out.data_ptr(), out.dtype(),
                                                      op, n);
  check_cuda(cudaGetLastError(), std::string(name) + ": kernel launch", idx);
}

void launch_map(const OpCall& c, Tensor& out, MapOp op, const char* name) {
  const Tensor& x = c.inputs[0];
  for (const Tensor* t : {&x, static_cast<const Tensor*>(&out)})
    check(is_kernel_float(t->dtype()), name, "cuda: ", t->str(),
          " is not supported yet (float32, float16, bfloat16 are)");
  const int64_t n = out.numel();
  if (n == 0) return;
  const std::vector<StridedView> v = make_views(out.shape(), {&x}, name);
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  map_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(x.data_ptr(), v[0], x.dtype(), out.data_ptr(),
                                                  out.dtype(), op, n);
  check_cuda(cudaGetLastError(), std::string(name) + ": kernel launch", idx);
}

void scalar(const OpCall& c, Tensor& out) {
  check(c.attrs.i0 >= int64_t(ScalarFn::add) && c.attrs.i0 <= int64_t(ScalarFn::pow), "scalar",
        "unknown function ", c.attrs.i0);
  if (is_kernel_int(c.inputs[0].dtype())) {
    const auto fn = ScalarFn(c.attrs.i0);
    const double s = c.attrs.f0;
    const bool integral = s == std::trunc(s) && std::fabs(s) < 9.0e15;  // the CPU's test
    const IntMapKind kind = integral && fn != ScalarFn::pow ? IntMapKind::exact : IntMapKind::via_double;
    launch_int_map(c, out, IntMapOp{kind, fn, integral ? int64_t(s) : 0, s, 0.0, 0.0}, "scalar");
    return;
  }
  launch_map(c, out, MapOp{MapKind::scalar, c.attrs.i0, float(c.attrs.f0), 0.f, 0.f}, "scalar");
}

void clamp(const OpCall& c, Tensor& out) {
  if (is_kernel_int(c.inputs[0].dtype())) {
    launch_int_map(c, out, IntMapOp{IntMapKind::clamp, ScalarFn::add, 0, 0.0, c.attrs.f0, c.attrs.f1}, "clamp");
    return;
  }
  launch_map(c, out, MapOp{MapKind::clamp, 0, 0.f, float(c.attrs.f0), float(c.attrs.f1)}, "clamp");
}

void unary(const OpCall& c, Tensor& out) {
  check(c.attrs.i0 >= int64_t(UnaryFn::silu) && c.attrs.i0 <= int64_t(UnaryFn::square), "unary",
        "unknown function ", c.attrs.i0);
  launch_map(c, out, MapOp{MapKind::unary, c.attrs.i0, 0.f, 0.f, 0.f}, "unary");
}

}  // namespace

void register_elementwise_kernels() {
  ops::register_kernel(OpKind::scalar, DeviceKind::cuda, scalar);
  ops::register_kernel(OpKind::clamp, DeviceKind::cuda, clamp);
  ops::register_kernel(OpKind::unary, DeviceKind::cuda, unary);
}

}  // namespace diffq::backend::cuda
