// sdpa through cuDNN's fused flash attention (a cuDNN frontend graph with one sdpa node): bf16 or fp16
// q, k, v of one dtype, head dims multiples of 8 (cuDNN's limit: up to 256 on Hopper, 128 elsewhere),
// any Sq and Sk, no mask. q, k and v go to cuDNN as the strided views they are when the head dim is
// contiguous and every other stride is a multiple of 8 elements (FLUX's and Wan's [B, S, H, D] ->
// [B, H, S, D] permutes are), else as contiguous copies. f32 accumulation and softmax, one rounding.
// Each shape builds its graph once (plan cache keyed by SdpaPlanKey); a shape cuDNN rejects is cached
// as rejected and runs the simple kernel of attention.cu from then on.
// Masked calls stay on the simple kernel: a row whose keys are all masked is 0 there, as torch; cuDNN's
// softmax over a row of -inf biases is not, and telling such rows apart needs a pass over the mask.
#include "backend/cuda/cudnn_ops.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <string>

#if DIFFQ_HAS_CUDNN
#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/cudnn_plan_keys.h"
#include "backend/cuda/runtime.h"
#endif

namespace diffq::backend::cuda {

#if DIFFQ_HAS_CUDNN

namespace {

constexpr int64_t kUidQ = 1, kUidK = 2, kUidV = 3, kUidO = 4;
constexpr int64_t kMaxHeadDim = 256;

CudnnOpBook<SdpaPlanKey, CudnnPlan, SdpaPlanKeyHash>& book() {
  static CudnnOpBook<SdpaPlanKey, CudnnPlan, SdpaPlanKeyHash> b;
  return b;
}

bool decline(std::string why) {
  book().reject(std::move(why));
  return false;
}

std::array<int64_t, 4> sizes4(const Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }
Strides4 strides4(const Tensor& t) { return {t.strides()[0], t.strides()[1], t.strides()[2], t.strides()[3]}; }

// `t` itself when cuDNN can read it in place, else a contiguous copy (made on the device, eagerly).
Tensor usable_view(const Tensor& t) {
  if (sdpa_strides_usable(sizes4(t), sdpa_key_strides(sizes4(t), strides4(t))) && address_alignment(t.data_ptr()) >= 16)
    return t;
  return ops::execute(ops::OpCall{ops::OpKind::copy, {t}, {}});
}

// The graph of one sdpa call (not yet validated or built).
// sm_version > 0 sets the target GPU (offline validation) before any node copies the graph's context;
// else the nodes read it from the current device.
std::shared_ptr<fe::graph::Graph> make_graph(const SdpaPlanKey& k, int sm_version = -1) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) g->set_sm_version(sm_version);
  g->set_io_data_type(fe_dtype(k.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, int64_t s, int64_t d, const Strides4& st) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim({k.B, k.H, s, d})
                         .set_stride({st[0], st[1], st[2], st[3]}));
  };
  auto Q = tensor("Q", kUidQ, k.Sq, k.D, k.q);
  auto K = tensor("K", kUidK, k.Sk, k.D, k.k);
  auto V = tensor("V", kUidV, k.Sk, k.Dv, k.v);
  auto attrs = fe::graph::SDPA_attributes().set_name("diffq_sdpa").set_generate_stats(false).set_attn_scale(k.scale);
  auto outs = g->sdpa(Q, K, V, attrs);
  outs[0]->set_output(true).set_uid(kUidO).set_dim({k.B, k.H, k.Sq, k.Dv}).set_stride({k.o[0], k.o[1], k.o[2], k.o[3]});
  return g;
}

}  // namespace

bool cudnn_sdpa(const ops::OpCall& c, Tensor& out) {
  const Tensor &q0 = c.inputs[0], &k0 = c.inputs[1], &v0 = c.inputs[2];
  if (c.inputs.size() > 3 && c.inputs[3].defined())
    return decline("a mask (the simple kernel gives fully masked rows torch's zeros)");
  const DType dt = q0.dtype();
  if ((dt != DType::bf16 && dt != DType::f16) || k0.dtype() != dt || v0.dtype() != dt || out.dtype() != dt)
    return decline(cat("dtypes q ", dtype_name(dt), ", k ", dtype_name(k0.dtype()), ", v ", dtype_name(v0.dtype()),
                       ", out ", dtype_name(out.dtype()), " (cuDNN takes bfloat16 or float16, all alike)"));
  const int64_t D = q0.size(3), Dv = v0.size(3), Sk = k0.size(2);
  if (D % 8 != 0 || Dv % 8 != 0 || D > kMaxHeadDim || Dv > kMaxHeadDim)
    return decline(cat("head dims ", D, " and ", Dv, " (cuDNN takes multiples of 8 up to ", kMaxHeadDim, ")"));
  if (out.numel() == 0 || Sk == 0) return decline("an empty call");
  if (!out.is_contiguous() || address_alignment(out.data_ptr()) < 16) return decline("an unaligned output");
  std::string why;
  if (!cudnn_runtime_compatible(&why)) return decline(why);

  const int idx = out.device().index;
  DeviceGuard guard(idx);
  const Tensor q = usable_view(q0), k = usable_view(k0), v = usable_view(v0);
  SdpaPlanKey key;
  key.device = idx;
  key.dtype = dt;
  key.B = q.size(0), key.H = q.size(1), key.Sq = q.size(2), key.Sk = Sk, key.D = D, key.Dv = Dv;
  key.q = sdpa_key_strides(sizes4(q), strides4(q));
  key.k = sdpa_key_strides(sizes4(k), strides4(k));
  key.v = sdpa_key_strides(sizes4(v), strides4(v));
  key.o = sdpa_key_strides(sizes4(out), strides4(out));
  key.scale = float(c.attrs.f0 > 0 ? c.attrs.f0 : 1.0 / std::sqrt(double(D)));
  key.mask = SdpaMaskKind::none;
  CudnnDevice* devp = nullptr;
  try {  // a cuDNN that cannot start here (wrong major version, engine libraries missing): the simple kernel
    devp = &cudnn_device(idx, "sdpa");
  } catch (const Error& e) {
    return decline(e.what());
  }
  CudnnDevice& dev = *devp;
  const std::shared_ptr<CudnnPlan> plan = book().plans().get_or_build(key, [&] {
    std::lock_guard<std::mutex> lock(dev.mu);  // the handle is not to be used by two threads at once
    return build_cudnn_plan(make_graph(key), dev.handle, false, "sdpa", key.device);
  });
  if (!plan->graph) return decline(cat("cuDNN rejected B=", key.B, " H=", key.H, " Sq=", key.Sq, " Sk=", Sk, " D=", D,
                                       " Dv=", Dv, " ", dtype_name(dt), ": ", plan->rejected));
  std::unordered_map<int64_t, void*> pack = {
      {kUidQ, q.data_ptr()}, {kUidK, k.data_ptr()}, {kUidV, v.data_ptr()}, {kUidO, out.data_ptr()}};
  run_plan(*plan->graph, plan->workspace, pack, "sdpa", idx);
  book().count_run();
  return true;
}

std::string cudnn_sdpa_validate_offline(const SdpaPlanKey& key, int sm_version) {
  auto g = make_graph(key, sm_version);
  return validate_offline(*g);
}

CudnnOpStats cudnn_sdpa_stats() { return book().stats(); }

void cudnn_sdpa_reset() { book().reset(); }

#else  // built without cuDNN: every call takes the simple kernel

bool cudnn_sdpa(const ops::OpCall&, Tensor&) { return false; }
std::string cudnn_sdpa_validate_offline(const SdpaPlanKey&, int) { return "built without cuDNN"; }
CudnnOpStats cudnn_sdpa_stats() { return {{}, 0, "built without cuDNN"}; }
void cudnn_sdpa_reset() {}

#endif

}  // namespace diffq::backend::cuda
