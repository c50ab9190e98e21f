#include "backend/cuda/compile/fused_kernel.h"

#include "backend/cuda/convert.cuh"
#include "backend/cuda/elementwise_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::backend::cuda {

namespace {

using compile::Instr;

constexpr int kThreads = 256;

// An instruction as the kernel reads it (by value, in the launch's parameters).
struct DeviceInstr {
  uint8_t op;
  int16_t a, b;
  int32_t fn;
  float s0, s1;
  DType dtype;
};

struct Program {
  int n = 0;
  DeviceInstr code[kMaxFusedInstrs];
};

struct Leaves {
  const void* data[kMaxFusedLeaves];
  DType dtype[kMaxFusedLeaves];
  StridedView view[kMaxFusedLeaves];
};

__device__ __forceinline__ float round_reg(DType t, float v) {
  if (t == DType::bf16) return bf16_bits_to_f32(f32_to_bf16_bits(v));
  if (t == DType::f16) return f16_bits_to_f32(f32_to_f16_bits(v));
  return v;
}

__global__ void fused_kernel(Program p, Leaves leaves, void* out, DType ot, int64_t n) {
  float reg[kMaxFusedInstrs];
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    for (int k = 0; k < p.n; ++k) {
      const DeviceInstr& in = p.code[k];
      float v = 0.0f;
      switch (Instr::Op(in.op)) {
        case Instr::Op::load: v = load_f32(leaves.data[in.a], leaves.dtype[in.a], leaves.view[in.a].offset_of(i)); break;
        case Instr::Op::binary: v = apply_binary(ops::BinaryFn(in.fn), reg[in.a], reg[in.b]); break;
        case Instr::Op::scalar: v = apply_scalar(ops::ScalarFn(in.fn), reg[in.a], in.s0); break;
        case Instr::Op::clamp: {
          const float x = reg[in.a];
          v = x < in.s0 ? in.s0 : x > in.s1 ? in.s1 : x;  // NaN stays NaN
          break;
        }
        case Instr::Op::unary: v = apply_unary(ops::UnaryFn(in.fn), reg[in.a]); break;
        case Instr::Op::cast: v = reg[in.a]; break;
      }
      reg[k] = round_reg(in.dtype, v);
    }
    store_f32(out, ot, i, reg[p.n - 1]);
  }
}

bool float_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

Tensor binary_op(ops::BinaryFn fn, const Tensor& a, const Tensor& b) {
  switch (fn) {
    case ops::BinaryFn::add: return ops::add(a, b);
    case ops::BinaryFn::sub: return ops::sub(a, b);
    case ops::BinaryFn::mul: return ops::mul(a, b);
    case ops::BinaryFn::div: return ops::div(a, b);
    case ops::BinaryFn::maximum: return ops::maximum(a, b);
    case ops::BinaryFn::minimum: return ops::minimum(a, b);
  }
  fail("compile", "cuda: unknown binary function ", int(fn));
}

Tensor scalar_op(ops::ScalarFn fn, const Tensor& x, float s) {
  switch (fn) {
    case ops::ScalarFn::add: return ops::add_scalar(x, s);
    case ops::ScalarFn::mul: return ops::mul_scalar(x, s);
    case ops::ScalarFn::rsub: return ops::rsub_scalar(x, s);
    case ops::ScalarFn::pow: return ops::pow_scalar(x, s);
  }
  fail("compile", "cuda: unknown scalar function ", int(fn));
}

// The program instruction by instruction through the eager ops (a program too long for the kernel's
// parameters): each instruction is the eager op it was fused from, so the values are the same; one
// pass over memory per instruction.
void run_by_ops(const compile::FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out) {
  std::vector<Tensor> reg(p.code.size());
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instr& in = p.code[k];
    const Tensor& a = in.a >= 0 && in.op != Instr::Op::load ? reg[size_t(in.a)] : Tensor();
    switch (in.op) {
      case Instr::Op::load: reg[k] = leaves[size_t(in.a)]; break;
      case Instr::Op::binary: reg[k] = binary_op(ops::BinaryFn(in.fn), a, reg[size_t(in.b)]); break;
      case Instr::Op::scalar: reg[k] = scalar_op(ops::ScalarFn(in.fn), a, in.s0); break;
      case Instr::Op::clamp: reg[k] = ops::clamp(a, in.s0, in.s1); break;
      case Instr::Op::unary: reg[k] = ops::unary(a, ops::UnaryFn(in.fn)); break;
      case Instr::Op::cast: reg[k] = a.to(in.dtype); break;
    }
    if (reg[k].dtype() != in.dtype) reg[k] = reg[k].to(in.dtype);
  }
  ops::copy_into(reg.back().expand(out.shape()), out);
}

}  // namespace

void run_fused(const compile::FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out) {
  check(!p.norm && !p.gemm, "compile", "cuda: a fused node with a norm or GEMM prologue (the CUDA compile backend "
                                       "offers fuse only)");
  check(!p.code.empty() && out.is_contiguous() && float_dtype(out.dtype()), "compile",
        "cuda: a fused node needs a program and a contiguous float output, got ", out.str());
  const int64_t n = out.numel();
  if (n == 0) return;
  if (int(p.code.size()) > kMaxFusedInstrs || int(leaves.size()) > kMaxFusedLeaves) return run_by_ops(p, leaves, out);
  Program prog;
  prog.n = int(p.code.size());
  for (size_t k = 0; k < p.code.size(); ++k) {
    const Instr& in = p.code[k];
    check(float_dtype(in.dtype), "compile", "cuda: a fused register of dtype ", dtype_name(in.dtype));
    prog.code[k] = DeviceInstr{uint8_t(in.op), int16_t(in.a), int16_t(in.b), int32_t(in.fn), in.s0, in.s1, in.dtype};
  }
  Leaves lv{};
  std::vector<const Tensor*> loaded;
  std::vector<int> slot;
  for (size_t j = 0; j < leaves.size(); ++j) {
    const Tensor& t = leaves[j];
    if (!t.defined()) continue;
    check(float_dtype(t.dtype()) && t.device() == out.device(), "compile", "cuda: fused leaf ", j, " is ", t.str(),
          " (float leaves on ", out.device().str(), " expected)");
    lv.data[j] = t.data_ptr();
    lv.dtype[j] = t.dtype();
    loaded.push_back(&t);
    slot.push_back(int(j));
  }
  const std::vector<StridedView> views = make_views(out.shape(), loaded, "compile");
  for (size_t k = 0; k < views.size(); ++k) lv.view[slot[k]] = views[k];
  DeviceGuard guard(out.device().index);
  fused_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(prog, lv, out.data_ptr(), out.dtype(), n);
  check_cuda(cudaGetLastError(), "compile: fused kernel launch", out.device().index);
}

}  // namespace diffq::backend::cuda
