// conv2d on CUDA through cuDNN: a cuDNN frontend graph of one convolution (NCHW, packed; dilation 1)
// with the bias added in the same graph (a pointwise add on the f32 accumulator, one rounding to the
// output dtype). x, w and bias of one float dtype run in it (f32 accumulation; float32 without TF32
// engines, as the CPU backend's float32 agreement needs); mixed dtypes are cast to float32 first and the
// result cast once to the output dtype, as the CPU backend widens them.
// Padding {left, right, top, bottom} goes to cuDNN as pre/post paddings; where no engine takes an
// asymmetric one the input is padded by a copy (zero strips concatenated) and convolved unpadded. Where
// no engine fuses the bias, the bias is added by a separate broadcast add. Each variant is tried once
// per shape and the outcome cached (plan cache keyed by ConvPlanKey).
#include "backend/channels_last.h"
#include "backend/cuda/cudnn_ops.h"
#include "backend/cuda/kernels.h"

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "diffq/error.h"

#if DIFFQ_HAS_CUDNN
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/cudnn_plan_keys.h"
#include "backend/cuda/runtime.h"
#include "ops/ops.h"
#endif

namespace diffq::backend::cuda {

#if DIFFQ_HAS_CUDNN

namespace {

constexpr int64_t kUidX = 1, kUidW = 2, kUidB = 3, kUidY = 4;

CudnnOpBook<ConvPlanKey, CudnnPlan, ConvPlanKeyHash>& book() {
  static CudnnOpBook<ConvPlanKey, CudnnPlan, ConvPlanKeyHash> b;
  return b;
}

bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// x[N, C, H, W] with `l`, `r` zero columns and `t`, `b` zero rows around each image (a copy).
Tensor zero_pad(const Tensor& x, int64_t l, int64_t r, int64_t t, int64_t b) {
  auto join = [&](const Tensor& y, int64_t before, int64_t after, int64_t dim) {
    if (before == 0 && after == 0) return y;
    std::vector<Tensor> parts;
    Shape s = y.shape();
    if (before > 0) s[size_t(dim)] = before, parts.push_back(Tensor::zeros(s, y.dtype(), y.device()));
    parts.push_back(y);
    if (after > 0) s[size_t(dim)] = after, parts.push_back(Tensor::zeros(s, y.dtype(), y.device()));
    ops::Attrs a;
    a.i0 = dim;
    return ops::execute(ops::OpCall{ops::OpKind::concat, parts, a});
  };
  return join(join(x, l, r, 3), t, b, 2);
}

// The graph of one conv2d call (not yet validated or built).
// sm_version > 0 sets the target GPU (offline validation) before any node copies the graph's context;
// else the nodes read it from the current device.
std::shared_ptr<fe::graph::Graph> make_graph(const ConvPlanKey& k, int sm_version = -1) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) g->set_sm_version(sm_version);
  g->set_io_data_type(fe_dtype(k.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto X = g->tensor(fe::graph::Tensor_attributes()
                         .set_name("x")
                         .set_uid(kUidX)
                         .set_dim({k.N, k.C, k.H, k.W})
                         .set_stride({k.C * k.H * k.W, k.H * k.W, k.W, 1}));
  auto Wt = g->tensor(fe::graph::Tensor_attributes()
                          .set_name("w")
                          .set_uid(kUidW)
                          .set_dim({k.O, k.C, k.KH, k.KW})
                          .set_stride({k.C * k.KH * k.KW, k.KH * k.KW, k.KW, 1}));
  auto conv = fe::graph::Conv_fprop_attributes()
                  .set_name("diffq_conv2d")
                  .set_pre_padding({k.pad[0], k.pad[1]})
                  .set_post_padding({k.pad[2], k.pad[3]})
                  .set_stride({k.stride, k.stride})
                  .set_dilation({1, 1});
  auto Y = g->conv_fprop(X, Wt, conv);
  if (k.bias) {
    auto Bt = g->tensor(fe::graph::Tensor_attributes()
                            .set_name("bias")
                            .set_uid(kUidB)
                            .set_dim({1, k.O, 1, 1})
                            .set_stride({k.O, 1, 1, 1}));
    Y = g->pointwise(Y, Bt, fe::graph::Pointwise_attributes().set_name("bias").set_mode(fe::PointwiseMode_t::ADD));
  }
  const int64_t Ho = (k.H + k.pad[0] + k.pad[2] - k.KH) / k.stride + 1;
  const int64_t Wo = (k.W + k.pad[1] + k.pad[3] - k.KW) / k.stride + 1;
  Y->set_output(true).set_uid(kUidY).set_data_type(fe_dtype(k.dtype)).set_dim({k.N, k.O, Ho, Wo}).set_stride(
      {k.O * Ho * Wo, Ho * Wo, Wo, 1});
  return g;
}

}  // namespace

void cudnn_conv2d(const ops::OpCall& c, Tensor& out) {
  // channels-last: by way of channels-first copies (backend/channels_last.h); the CUDA device does not
  // ask for it (DeviceInterface::prefers_channels_last), so the models' convolutions stay channels-first here.
  if (is_channels_last(c)) return run_channels_first(c, out, cudnn_conv2d);
  const Tensor &x0 = c.inputs[0], &w0 = c.inputs[1];
  const Tensor b0 = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  const bool has_bias = b0.defined();
  for (const Tensor* t : {&x0, &w0, &b0})
    check(!t->defined() || is_float(t->dtype()), "conv2d", "cuda: ", t->str(),
          " is not supported (float32, float16, bfloat16 are)");
  check(is_float(out.dtype()), "conv2d", "cuda: output ", out.str(), " is not supported");
  if (out.numel() == 0) return;
  std::string why;
  check(cudnn_runtime_compatible(&why), "conv2d", "cuda: ", why);
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  // One dtype for the graph: the common one, else float32 (cast copies, as the CPU backend widens).
  const bool alike = w0.dtype() == x0.dtype() && (!has_bias || b0.dtype() == x0.dtype()) && out.dtype() == x0.dtype();
  const DType dt = alike ? x0.dtype() : DType::f32;
  const Tensor x = packed_operand(x0, dt), w = packed_operand(w0, dt);
  const Tensor bias = has_bias ? packed_operand(b0, dt) : Tensor();
  const int64_t s = c.attrs.ints[0], pl = c.attrs.ints[1], pr = c.attrs.ints[2], pt = c.attrs.ints[3],
                pb = c.attrs.ints[4];
  CudnnDevice& dev = cudnn_device(idx, "conv2d");

  // The variants, best first: padding by cuDNN or by a copy (only when asymmetric), bias fused or not.
  std::string rejections;
  for (ConvPadMode mode : {ConvPadMode::cudnn, ConvPadMode::copy}) {
    if (mode == ConvPadMode::copy && pl == pr && pt == pb) continue;
    const Tensor xin = mode == ConvPadMode::copy ? zero_pad(x, pl, pr, pt, pb) : x;
    for (bool fused : {true, false}) {
      if (!fused && !has_bias) continue;
      ConvPlanKey key;
      key.device = idx;
      key.dtype = dt;
      key.N = xin.size(0), key.C = xin.size(1), key.H = xin.size(2), key.W = xin.size(3);
      key.O = w.size(0), key.KH = w.size(2), key.KW = w.size(3);
      key.stride = s;
      if (mode == ConvPadMode::cudnn) key.pad = {pt, pl, pb, pr};
      key.bias = has_bias && fused;
      key.pad_mode = mode;
      const std::shared_ptr<CudnnPlan> plan = book().plans().get_or_build(key, [&] {
        std::lock_guard<std::mutex> lock(dev.mu);  // the handle is not to be used by two threads at once
        return build_cudnn_plan(make_graph(key), dev.handle, key.dtype == DType::f32, "conv2d", key.device);
      });
      if (!plan->graph) {
        rejections += cat(rejections.empty() ? "" : "; ", mode == ConvPadMode::cudnn ? "cuDNN padding" : "padded copy",
                          fused ? ", bias fused: " : ", bias apart: ", plan->rejected);
        continue;
      }
      // The graph writes `out` itself when it has out's dtype and the bias is fused, else a float
      // temporary that the bias add and the cast finish.
      const bool direct = dt == out.dtype() && key.bias == has_bias;
      Tensor y = direct ? out : Tensor::empty(out.shape(), dt, out.device());
      std::unordered_map<int64_t, void*> pack = {
          {kUidX, xin.data_ptr()}, {kUidW, w.data_ptr()}, {kUidY, y.data_ptr()}};
      if (key.bias) pack[kUidB] = bias.data_ptr();
      run_plan(*plan->graph, plan->workspace, pack, "conv2d", idx);
      if (has_bias && !key.bias) {
        ops::Attrs a;
        a.i0 = int64_t(ops::BinaryFn::add);
        y = ops::execute(ops::OpCall{ops::OpKind::binary, {y, bias.view({1, bias.numel(), 1, 1})}, a});
      }
      if (!direct) ops::copy_into(y, out);
      if (c.inputs.size() > 3 && c.inputs[3].defined()) {  // conv2d_add: residual + the conv (rounded: out)
        ops::Attrs a;
        a.i0 = int64_t(ops::BinaryFn::add);
        ops::copy_into(ops::execute(ops::OpCall{ops::OpKind::binary, {c.inputs[3], out}, a}), out);
      }
      book().count_run();
      return;
    }
  }
  book().reject(rejections);
  fail("conv2d", "cuda:", idx, ": cuDNN has no convolution for x ", x0.str(), ", w ", w0.str(), " stride ", s,
       " padding {", pl, ", ", pr, ", ", pt, ", ", pb, "} (", rejections, ")");
}

std::string cudnn_conv2d_validate_offline(const ConvPlanKey& key, int sm_version) {
  auto g = make_graph(key, sm_version);
  return validate_offline(*g);
}

CudnnOpStats cudnn_conv2d_stats() { return book().stats(); }

void cudnn_conv2d_reset() { book().reset(); }

void register_cudnn_kernels() { ops::register_kernel(ops::OpKind::conv2d, DeviceKind::cuda, cudnn_conv2d); }

#else  // built without cuDNN: conv2d has no CUDA kernel

void cudnn_conv2d(const ops::OpCall&, Tensor&) { fail("conv2d", "cuda: this build has no cuDNN"); }
std::string cudnn_conv2d_validate_offline(const ConvPlanKey&, int) { return "built without cuDNN"; }
CudnnOpStats cudnn_conv2d_stats() { return {{}, 0, "built without cuDNN"}; }
void cudnn_conv2d_reset() {}
void register_cudnn_kernels() {}

#endif

}  // namespace diffq::backend::cuda
