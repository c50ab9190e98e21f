#include "ops/weight_packing.h"

#include <map>
#include <mutex>

#include "ops/op.h"

namespace diffq::ops {

namespace {

struct Registry {
  std::mutex mu;
  std::map<DeviceKind, WeightPacker> packers;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_weight_packer(DeviceKind d, WeightPacker fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (fn) r.packers[d] = std::move(fn);
  else r.packers.erase(d);
}

std::shared_ptr<PackedWeight> pack_linear_weight(const Tensor& w, DType x_dtype, Device x_device) {
  if (!w.defined() || w.dim() != 2 || x_device != w.device() || w.is_symbolic()) return nullptr;
  find_kernel(OpKind::copy, DeviceKind::cpu);  // the backends register on first use
  WeightPacker fn;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.packers.find(w.device().kind);
    if (it == r.packers.end()) return nullptr;
    fn = it->second;
  }
  return fn(w, x_dtype);
}

}  // namespace diffq::ops
