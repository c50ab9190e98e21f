#include "compile/compile_backend.h"

#include <array>
#include <atomic>

#include "ops/op.h"

namespace diffq::compile {

namespace {
constexpr size_t kKinds = 2;  // DeviceKind::cpu, DeviceKind::cuda
std::array<std::atomic<const CompileBackend*>, kKinds>& table() {
  static std::array<std::atomic<const CompileBackend*>, kKinds> t{};
  return t;
}
}  // namespace

void register_compile_backend(DeviceKind d, const CompileBackend* b) { table()[size_t(d)].store(b); }

const CompileBackend* find_compile_backend(DeviceKind d) {
  ops::find_kernel(ops::OpKind::copy, DeviceKind::cpu);  // the backends register on first use
  return table()[size_t(d)].load();
}

}  // namespace diffq::compile
