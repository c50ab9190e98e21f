// compile's reduce-overhead mode on a device (torch.compile's mode="reduce-overhead": CUDA graphs): the
// device work of a compiled call is captured once per key and replayed on later calls, so a step
// queues one graph launch per block instead of every kernel.
//
// The key of a call: its compile signature (input shapes/dtypes/devices, parameter shapes/schemes/
// devices), the addresses of the module's parameters (a captured graph reads them where they were:
// weights moved by offloading, or another block's weights, make another key) and what each LoRA
// adapter would bake into the graph (its adapters, weights, scales: LinearAdapter::replay_key). A
// changed shape, LoRA or offload state is another key: a new capture, never a stale replay.
//
// Per key: the first call runs eagerly (a warm-up: kernel plans, workspaces, LoRA operands and caches
// are made outside the capture); the second captures the call on static inputs (tensors of the graph
// pool), then every call copies its inputs into them, replays, and copies the outputs out. A call
// that cannot be captured (DeviceInterface::capture's reasons) runs eagerly, then and on every later
// call of that key, with the reason in the stats. Captured graphs of one device replay one at a time
// (they share the device's graph pool): a per-device lock orders copy-in, replay and copy-out.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "diffq/tensor.h"

namespace diffq {
class Module;
}
namespace diffq::backend {
class CapturedWork;
}

namespace diffq::compile {

struct DeviceGraphStats {
  int64_t warmups = 0;    // first calls of a key, run eagerly
  int64_t captures = 0;   // graphs captured
  int64_t replays = 0;    // calls served by a captured graph (the capturing call included)
  int64_t refused = 0;    // calls run eagerly because their key could not be captured
  int64_t graphs = 0;     // graphs held now
  std::string last_refusal;  // why the last refused key could not be captured
};

class DeviceGraphs {
 public:
  using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  DeviceGraphs();
  ~DeviceGraphs();
  DeviceGraphs(const DeviceGraphs&) = delete;
  DeviceGraphs& operator=(const DeviceGraphs&) = delete;

  // `body(inputs)` through a captured graph of `m`'s key (`signature` is the compile signature). The
  // inputs must be on one non-CPU device.
  std::vector<Tensor> run(Module& m, const std::string& signature, const std::vector<Tensor>& inputs,
                          const Body& body);
  DeviceGraphStats stats() const;

  // The replay key of a call (see above); exposed for tests.
  static std::string key(Module& m, const std::string& signature);
  // At most this many keys are kept; past it the oldest graphs are dropped (recaptured if met again).
  static constexpr size_t kMaxKeys = 1024;

 private:
  struct Graph;
  struct Entry {
    std::shared_ptr<Graph> graph;
    std::string refused;  // non-empty: runs eagerly, for this reason
    int64_t order = 0;    // when it was made (eviction order)
  };
  std::vector<Tensor> replay(Graph& g, const std::vector<Tensor>& inputs);
  void evict_oldest_locked();

  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  int64_t made_ = 0;
  DeviceGraphStats stats_;
};

}  // namespace diffq::compile
