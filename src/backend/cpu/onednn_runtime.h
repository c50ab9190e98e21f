// What diffq's oneDNN kernels (onednn_gemm.cpp, onednn_conv.cpp) share: one CPU engine, the test for an
// implementation worth running (never oneDNN's reference kernels), and the OpenMP team size of the
// calling thread. Debian's oneDNN runs on OpenMP (libgomp, loaded as its dependency): the team size is
// set through omp_set_num_threads looked up at run time, so diffq links no OpenMP runtime of its own.
#pragma once

#include <dnnl.hpp>
#include <string>

namespace diffq::backend::cpu {

dnnl::engine& onednn_engine();

// False for oneDNN's reference implementations ("ref:any", ...): slower than diffq's own kernels.
bool onednn_native_impl(const std::string& impl);

// oneDNN's OpenMP team size for the calling thread is `n` for the scope, restored after (a no-op where
// no OpenMP runtime is loaded).
class OmpTeam {
 public:
  explicit OmpTeam(int n);
  ~OmpTeam();
  OmpTeam(const OmpTeam&) = delete;
  OmpTeam& operator=(const OmpTeam&) = delete;
  // For threads that always run oneDNN single-threaded (onednn_gemm's per-thread parts): no restore.
  static void set_for_this_thread(int n);

 private:
  int prev_ = 0;
};

}  // namespace diffq::backend::cpu
