#include "ops/linear_q.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace diffq::ops {

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::pair<DeviceKind, std::string>, KernelFn, std::less<>> kernels;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_linear_q_kernel(DeviceKind d, std::string_view scheme, KernelFn fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (fn) r.kernels[{d, std::string(scheme)}] = fn;
  else r.kernels.erase({d, std::string(scheme)});
}

KernelFn find_linear_q_kernel(DeviceKind d, std::string_view scheme) {
  find_kernel(OpKind::copy, DeviceKind::cpu);  // the backends register on first use
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string key : {std::string(scheme), std::string("*")}) {
    auto it = r.kernels.find(std::pair<DeviceKind, std::string>{d, key});
    if (it != r.kernels.end()) return it->second;
  }
  return nullptr;
}

std::vector<std::pair<std::string, KernelFn>> take_linear_q_kernels(DeviceKind d) {
  find_kernel(OpKind::copy, DeviceKind::cpu);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::pair<std::string, KernelFn>> out;
  for (auto it = r.kernels.begin(); it != r.kernels.end();) {
    if (it->first.first == d) {
      out.emplace_back(it->first.second, it->second);
      it = r.kernels.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

Tensor linear_q(const Tensor& x, const PackedWeight& w, const Tensor& bias) {
  OpCall c{OpKind::linear_q, {x, bias}, {}};
  for (Tensor& t : w.storage_tensors()) c.inputs.push_back(std::move(t));
  c.attrs.packed = &w;
  return dispatch(std::move(c));
}

}  // namespace diffq::ops
