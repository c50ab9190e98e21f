#include "backend/cuda_kernel_rules.h"

#include "diffq/error.h"

namespace diffq::backend {

namespace {

using ops::OpKind;

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }
bool is_int(DType t) {
  return t == DType::i8 || t == DType::u8 || t == DType::i32 || t == DType::i64 || t == DType::boolean;
}
bool is_numeric(DType t) { return is_float(t) || is_int(t); }

const char* const kFloats = "float32, float16, bfloat16";
const char* const kNumeric = "float32, float16, bfloat16, int8, uint8, int32, int64, bool";

// The first defined input (or the output, index -1) whose dtype fails `ok`, as a reason.
template <class Pred>
std::string first_not(const ops::OpCall& c, DType out, Pred ok, const char* takes) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined() && !ok(c.inputs[i].dtype()))
      return cat("input ", i, " is ", dtype_name(c.inputs[i].dtype()), " (the CUDA kernel takes ", takes, ")");
  if (!ok(out)) return cat("the output would be ", dtype_name(out), " (the CUDA kernel writes ", takes, ")");
  return {};
}

}  // namespace

std::string cuda_kernel_refuses(const ops::OpCall& c, DType out) {
  switch (c.kind) {
    case OpKind::copy:
    case OpKind::to_device:
    case OpKind::concat:
      return {};  // bits moved as they are: every dtype
    case OpKind::upsample_nearest2x:
      return c.inputs[0].dim() == 4 ? std::string() : cat("x has ", c.inputs[0].dim(), " dims, not [N, C, H, W]");
    case OpKind::cast: {
      const DType from = c.inputs[0].dtype();
      if (from == out || (is_float(from) && is_float(out)) || (is_numeric(from) && is_numeric(out))) return {};
      return cat("a cast ", dtype_name(from), " -> ", dtype_name(out), " (the CUDA kernel casts between ", kNumeric,
                 "; the float8 types only copy)");
    }
    case OpKind::binary:
    case OpKind::reduce:
      if (c.kind == OpKind::reduce && is_int(c.inputs[0].dtype()) && out != c.inputs[0].dtype())
        return cat("an integer reduce into ", dtype_name(out), " (the CUDA kernel keeps the input's dtype)");
      return first_not(c, out, is_numeric, kNumeric);
    case OpKind::scalar:
    case OpKind::clamp:
      if (is_int(c.inputs[0].dtype()))
        return out == c.inputs[0].dtype() ? std::string()
                                          : cat("an integer ", ops::op_name(c.kind), " into ", dtype_name(out));
      return first_not(c, out, is_float, kFloats);
    case OpKind::embedding: {
      const DType ids = c.inputs[0].dtype();
      if (!is_int(ids) || ids == DType::boolean) return cat("ids of ", dtype_name(ids), " (the CUDA kernel takes integers)");
      return {};
    }
    case OpKind::absmax_blocks:
      if (!is_float(c.inputs[0].dtype())) return cat("input 0 is ", dtype_name(c.inputs[0].dtype()), " (takes ", kFloats, ")");
      return out == DType::f32 ? std::string() : cat("the output would be ", dtype_name(out), ", not float32");
    case OpKind::sdpa: {
      for (size_t i = 0; i < 3; ++i)
        if (!is_float(c.inputs[i].dtype()))
          return cat("input ", i, " is ", dtype_name(c.inputs[i].dtype()), " (the CUDA kernels take ", kFloats, ")");
      const bool masked = c.inputs.size() > 3 && c.inputs[3].defined();
      if (masked && !is_float(c.inputs[3].dtype()) && c.inputs[3].dtype() != DType::boolean)
        return cat("a mask of ", dtype_name(c.inputs[3].dtype()), " (additive float or boolean masks are taken)");
      if (masked && (c.inputs[0].size(3) > 256 || c.inputs[2].size(3) > 256))
        return cat("a mask with head dims ", c.inputs[0].size(3), " and ", c.inputs[2].size(3),
                   " (masked attention takes head dims up to 256)");
      return is_float(out) ? std::string() : cat("the output would be ", dtype_name(out));
    }
    case OpKind::linear_q:  // the kernel itself is chosen per scheme (ops/linear_q.h)
      return is_float(c.inputs[0].dtype()) && is_float(out) ? std::string()
                                                             : cat("x of ", dtype_name(c.inputs[0].dtype()));
    case OpKind::linear:
    case OpKind::matmul:
    case OpKind::unary:
    case OpKind::softmax:
    case OpKind::layer_norm:
    case OpKind::rms_norm:
    case OpKind::group_norm:
    case OpKind::channel_norm:
    case OpKind::rope:
    case OpKind::conv2d:
    case OpKind::mul_add:
      return first_not(c, out, is_float, kFloats);
    case OpKind::rms_norm_rope:  // (the CUDA backend registers none: ops::rms_norm_rope runs its pieces there)
      return first_not(c, out, is_float, kFloats);
    case OpKind::count_:
      break;
  }
  return cat("op ", ops::op_name(c.kind), " has no rule");
}

}  // namespace diffq::backend
