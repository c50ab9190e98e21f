#include "backend/cpu/onednn_runtime.h"

#include <dlfcn.h>

namespace diffq::backend::cpu {

namespace {
using SetFn = void (*)(int);
using GetFn = int (*)();
SetFn omp_set() {
  static const SetFn f = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  return f;
}
GetFn omp_get() {
  static const GetFn f = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  return f;
}
}  // namespace

dnnl::engine& onednn_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

bool onednn_native_impl(const std::string& impl) { return impl.find("ref") == std::string::npos; }

OmpTeam::OmpTeam(int n) {
  if (omp_set() && omp_get()) {
    prev_ = omp_get()();
    if (prev_ != n) omp_set()(n);
  }
}

OmpTeam::~OmpTeam() {
  if (omp_set() && prev_ > 0) omp_set()(prev_);
}

void OmpTeam::set_for_this_thread(int n) {
  if (omp_set()) omp_set()(n);
}

}  // namespace diffq::backend::cpu
