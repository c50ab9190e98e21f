#include <array>
#include <atomic>
#include <chrono>
#include <mutex>

#include "backend/device_interface.h"
#include "backend/register_backends.h"
#include "diffq/error.h"
#include "ops/op.h"
#include "ops/op_profile.h"
#include "ops/ops.h"
#include "ops/kernel_precondition.h"
#include "ops/linear_q.h"
#include "ops/trace.h"


namespace diffq::ops {

namespace {
constexpr size_t kNumOps = static_cast<size_t>(OpKind::count_);
constexpr size_t kNumDeviceKinds = 2;
using Table = std::array<std::array<KernelFn, kNumDeviceKinds>, kNumOps>;

Table& table() {
  static Table t{};
  return t;
}

std::array<std::atomic<KernelPrecondition>, kNumDeviceKinds>& preconditions() {
  static std::array<std::atomic<KernelPrecondition>, kNumDeviceKinds> p{};
  return p;
}

void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] { backend::register_all_kernels(); });
}

constexpr std::array<std::string_view, kNumOps> kNames = {
    "copy",      "cast",       "to_device",  "linear",  "matmul",    "binary",
    "scalar",    "clamp",      "unary",      "softmax", "layer_norm", "rms_norm",
    "group_norm", "rope",      "sdpa",       "conv2d",  "upsample_nearest2x", "concat",
    "embedding", "reduce",     "absmax_blocks", "channel_norm", "linear_q",
    "mul_add",   "rms_norm_rope"};
}  // namespace

std::string_view op_name(OpKind k) {
  const size_t i = static_cast<size_t>(k);
  return i < kNumOps ? kNames[i] : std::string_view("unknown");
}

void register_kernel(OpKind k, DeviceKind d, KernelFn fn) {
  table()[static_cast<size_t>(k)][static_cast<size_t>(d)] = fn;
}

KernelFn find_kernel(OpKind k, DeviceKind d) {
  ensure_registered();
  return table()[static_cast<size_t>(k)][static_cast<size_t>(d)];
}

KernelPrecondition set_kernel_precondition(DeviceKind d, KernelPrecondition p) {
  return preconditions()[static_cast<size_t>(d)].exchange(p);
}

namespace {
// A call the device's kernel would refuse: one clear error before anything is queued on the device.
void check_precondition(const OpCall& call, const OutputMeta& meta, Device where) {
  const KernelPrecondition pre = preconditions()[static_cast<size_t>(where.kind)].load();
  if (!pre) return;
  const std::string why = pre(call, meta.dtype);
  check(why.empty(), op_name(call.kind), "no kernel for this call on ", where.str(), ": ", why);
}

// The profile's clock stops when the device finished the op (a no-op on the CPU, whose kernels return done).
void wait_for_device(Device d) {
  if (d.is_cpu()) return;
  if (backend::DeviceInterface* di = backend::device_interface(d.kind)) di->synchronize(d.index);
}
}  // namespace

namespace {
// execute(); a linear_q kernel is handed `preset` (a view of the result's meta, or undefined) as its out: it writes
// there where it can, else sets out to a result of its own, which is then copied into preset.
Tensor execute_with(const OpCall& call, const Tensor& preset) {
  const OutputMeta meta = infer(call);
  // to_device runs on the CUDA backend when either end is a CUDA device (cpu->cuda, cuda->cpu,
  // cuda->cuda); every other op runs where its output lives.
  Device where = meta.device;
  if (call.kind == OpKind::to_device && !meta.device.is_cuda()) where = call.inputs[0].device();
  const bool quantized = call.kind == OpKind::linear_q;
  KernelFn fn = quantized ? find_linear_q_kernel(where.kind, call.attrs.packed->scheme()) : find_kernel(call.kind, where.kind);
  if (!fn) {
    backend::require_device(where, op_name(call.kind));  // no backend / no device: say which
    fail(op_name(call.kind), "no kernel for device ", where.str(),
         quantized ? " and scheme " + call.attrs.packed->scheme() : std::string(), " in this build of diffq");
  }
  check_precondition(call, meta, where);
  const auto t0 = op_profile_enabled() ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  // linear_q's kernels allocate their own result (ops/linear_q.h); every other kernel fills a fresh tensor.
  Tensor out = quantized ? preset : Tensor::empty(meta.shape, meta.dtype, meta.device);
  if (quantized || out.numel() > 0) fn(call, out);
  if (quantized)
    check(out.defined() && out.shape() == meta.shape && out.dtype() == meta.dtype && out.device() == meta.device,
          "linear_q", "the ", call.attrs.packed->scheme(), " kernel on ", where.str(), " returned ",
          out.defined() ? out.str() : std::string("nothing"), ", not ", dtype_name(meta.dtype), " ",
          shape_str(meta.shape), " on ", meta.device.str());
  if (op_profile_enabled()) {
    wait_for_device(where);  // a device queues its kernels: time them, not their launch
    op_profile_record(call.kind, meta.dtype, op_profile_shapes() ? op_profile_shapes_of(call) : std::string(),
                      op_profile_flops(call),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (preset.defined() && (out.data_ptr() != preset.data_ptr() || out.strides() != preset.strides())) {
    copy_into(out, preset);  // the kernel's own result
    return preset;
  }
  return out;
}
}  // namespace

Tensor execute(const OpCall& call) { return execute_with(call, Tensor()); }

namespace {
// The checks of a call executed into a caller's output (execute_into, execute_linear_q_into): eager, real inputs,
// and an output of the call's meta whose rows the CPU kernels can write (last stride 1; CUDA: any view).
OutputMeta check_given_output(const OpCall& call, const Tensor& out) {
  check(Trace::current() == nullptr, op_name(call.kind), "writing into a given output cannot be traced");
  for (const Tensor& t : call.inputs)
    check(!t.defined() || !t.is_symbolic(), op_name(call.kind), "a symbolic (traced) tensor was used outside its trace");
  const OutputMeta meta = infer(call);
  check(out.defined() && !out.is_symbolic() && out.shape() == meta.shape && out.dtype() == meta.dtype &&
            out.device() == meta.device,
        op_name(call.kind), "output ", out.defined() ? out.str() : std::string("(undefined)"), " is not the ",
        dtype_name(meta.dtype), " tensor of shape ", shape_str(meta.shape), " on ", meta.device.str(),
        " the call produces");
  check(out.is_contiguous() || !meta.device.is_cpu() || out.strides().back() == 1 || out.shape().back() <= 1,
        op_name(call.kind), "output must be contiguous (on the CPU: its rows), got ", out.str());
  return meta;
}
}  // namespace

void execute_linear_q_into(const OpCall& call, const Tensor& out) {
  check(call.kind == OpKind::linear_q, op_name(call.kind), "only linear_q writes into a given output this way");
  check_given_output(call, out);
  execute_with(call, out);
}

void execute_into(const OpCall& call, Tensor& out) {
  check(call.kind == OpKind::copy || call.kind == OpKind::cast, op_name(call.kind),
        "only copy and cast write into a given output");
  const OutputMeta meta = check_given_output(call, out);
  KernelFn fn = find_kernel(call.kind, meta.device.kind);
  check(fn != nullptr, op_name(call.kind), "no kernel for device ", meta.device.str(), " in this build of diffq");
  check_precondition(call, meta, meta.device);
  if (out.numel() == 0) return;
  if (op_profile_enabled()) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(call, out);
    wait_for_device(meta.device);
    op_profile_record(call.kind, meta.dtype, op_profile_shapes() ? op_profile_shapes_of(call) : std::string(),
                      0.0, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return;
  }
  fn(call, out);
}

Tensor dispatch(OpCall call) {
  if (Trace* t = Trace::current()) {
    const OutputMeta meta = infer(call);
    return t->record(std::move(call), meta);
  }
  bool symbolic = false;
  for (const Tensor& t : call.inputs) symbolic |= t.is_symbolic();
  check(!symbolic, op_name(call.kind), "a symbolic (traced) tensor was used outside its trace");
  return execute(call);
}

}  // namespace diffq::ops
