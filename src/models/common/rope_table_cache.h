// The RoPE tables (cos, sin) of the positions last asked for, kept on their device. A denoising loop asks
// every step (and twice per step with CFG) for the tables of the same positions: on a GPU, recomputing
// them on the host and uploading them (2 x 4608 x 128 floats for FLUX.1 at 1024x1024, 2 x 32760 x 128 for
// Wan at 480p) each call would cost host trigonometry and PCIe time every forward. The key is whatever
// determines the tables (the position ids' values for FLUX, the grid for Wan) plus the device; a new key
// recomputes; the owner clears it at the end of each generation. The cached tensors are values: callers
// never write into them.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::models {

class RopeTableCache {
 public:
  // The cached (cos, sin) for `key` on `device`, else make() (host maths, returning tables on `device`).
  template <class Make>
  std::pair<Tensor, Tensor> get(std::vector<double> key, Device device, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    if (valid_ && device == device_ && key == key_) return {cos_, sin_};
    auto [c, s] = std::forward<Make>(make)();
    key_ = std::move(key);
    device_ = device;
    cos_ = c;
    sin_ = s;
    valid_ = true;
    return {std::move(c), std::move(s)};
  }

  // Drops the tables (a pipeline calls this at the end of a generation: the next may have other
  // positions, and memory between generations returns to its idle level).
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    valid_ = false;
    key_.clear();
    cos_ = sin_ = Tensor();
  }

 private:
  std::mutex mu_;
  bool valid_ = false;
  std::vector<double> key_;
  Device device_{};
  Tensor cos_, sin_;
};

}  // namespace diffq::models
