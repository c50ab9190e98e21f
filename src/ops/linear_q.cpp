#include "ops/linear_q.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "diffq/error.h"
#include "ops/ops.h"
#include "ops/trace.h"

namespace diffq::ops {

namespace {

struct Entry {
  KernelFn fn = nullptr;
  bool applies_activation = false;
};

struct Registry {
  std::mutex mu;
  std::map<std::pair<DeviceKind, std::string>, Entry, std::less<>> kernels;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_linear_q_kernel(DeviceKind d, std::string_view scheme, KernelFn fn, bool applies_activation) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (fn) r.kernels[{d, std::string(scheme)}] = {fn, applies_activation};
  else r.kernels.erase({d, std::string(scheme)});
}

namespace {
// The entry linear_q runs for `scheme` on `d`: the scheme's own, else the device's "*".
Entry find_entry(DeviceKind d, std::string_view scheme) {
  find_kernel(OpKind::copy, DeviceKind::cpu);  // the backends register on first use
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string key : {std::string(scheme), std::string("*")}) {
    auto it = r.kernels.find(std::pair<DeviceKind, std::string>{d, key});
    if (it != r.kernels.end()) return it->second;
  }
  return {};
}
}  // namespace

KernelFn find_linear_q_kernel(DeviceKind d, std::string_view scheme) { return find_entry(d, scheme).fn; }

bool linear_q_applies_activation(DeviceKind d, std::string_view scheme) {
  return find_entry(d, scheme).applies_activation;
}

std::vector<std::pair<std::string, KernelFn>> take_linear_q_kernels(DeviceKind d) {
  find_kernel(OpKind::copy, DeviceKind::cpu);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::pair<std::string, KernelFn>> out;
  for (auto it = r.kernels.begin(); it != r.kernels.end();) {
    if (it->first.first == d) {
      out.emplace_back(it->first.second, it->second.fn);
      it = r.kernels.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

namespace {
OpCall linear_q_op(const Tensor& x, const PackedWeight& w, const Tensor& bias, int64_t act) {
  OpCall c{OpKind::linear_q, {x, bias}, {}};
  for (Tensor& t : w.storage_tensors()) c.inputs.push_back(std::move(t));
  c.attrs.packed = &w;
  c.attrs.i1 = act;
  return c;
}
Tensor linear_q_call(const Tensor& x, const PackedWeight& w, const Tensor& bias, int64_t act) {
  return dispatch(linear_q_op(x, w, bias, act));
}
}  // namespace

void linear_q_into(const Tensor& x, const PackedWeight& w, const Tensor& bias, std::optional<UnaryFn> act,
                   const Tensor& out) {
  check(x.defined(), "linear_q", "linear_q_into of an undefined input");
  if (act && !linear_q_applies_activation(x.device().kind, w.scheme())) {
    copy_into(unary(linear_q_call(x, w, bias, 0), *act), out);
    return;
  }
  execute_linear_q_into(linear_q_op(x, w, bias, act ? 1 + int64_t(*act) : 0), out);
}

Tensor linear_q(const Tensor& x, const PackedWeight& w, const Tensor& bias) { return linear_q_call(x, w, bias, 0); }

Tensor linear_q_act(const Tensor& x, const PackedWeight& w, const Tensor& bias, UnaryFn act) {
  if (Trace::current() == nullptr && x.defined() && linear_q_applies_activation(x.device().kind, w.scheme()))
    return linear_q_call(x, w, bias, 1 + int64_t(act));
  return unary(linear_q_call(x, w, bias, 0), act);
}

}  // namespace diffq::ops
