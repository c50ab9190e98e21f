#include "compile/device_graphs.h"

#include <cstdio>
#include <sstream>

#include "backend/device_interface.h"
#include "diffq/error.h"
#include "modules/layers.h"
#include "modules/module.h"
#include "ops/ops.h"

namespace diffq::compile {

struct DeviceGraphs::Graph {
  std::unique_ptr<backend::CapturedWork> work;
  // Where the captured work reads its inputs and leaves its outputs: graph-pool addresses, borrowed
  // (the blocks are free for other captures between replays; undefined for an undefined input/output).
  std::vector<Tensor> in_views, out_views;
};

namespace {

// One lock per device: its captured graphs share its graph pool, so copy-in, replay and copy-out of one
// graph must not interleave with another's (backend/device_interface.h).
std::mutex& device_lock(Device d) {
  static std::mutex table_mu;
  static std::map<std::string, std::unique_ptr<std::mutex>> locks;
  std::lock_guard<std::mutex> lock(table_mu);
  auto& m = locks[d.str()];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

// A view of t's bytes that does not keep them alive.
Tensor borrowed_view(const Tensor& t) {
  if (!t.defined()) return t;
  auto st = Storage::borrow(t.storage()->data(), t.storage()->nbytes(), t.device(), nullptr);
  return Tensor(st, t.shape(), t.strides(), t.offset(), t.dtype());
}

Device device_of(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined()) return t.device();
  return Device::cpu();
}

}  // namespace

DeviceGraphs::DeviceGraphs() = default;
DeviceGraphs::~DeviceGraphs() = default;

std::string DeviceGraphs::key(Module& m, const std::string& signature) {
  std::ostringstream s;
  s << signature << '|';
  for (const auto& [name, p] : m.named_parameters()) {
    if (!p->defined()) continue;
    s << name << '@';
    if (const ops::PackedWeight* pw = p->packed_form()) {
      for (const Tensor& t : pw->storage_tensors()) s << (t.defined() ? t.data_ptr() : nullptr) << ',';
    } else {
      s << p->dense().data_ptr();
    }
    s << ';';
  }
  for (const auto& [name, mod] : m.named_modules())
    if (auto* lin = dynamic_cast<Linear*>(mod); lin && lin->adapter) s << "|lora " << name << ':' << lin->adapter->replay_key();
  return s.str();
}

std::vector<Tensor> DeviceGraphs::run(Module& m, const std::string& signature, const std::vector<Tensor>& inputs,
                                      const Body& body) {
  const Device dev = device_of(inputs);
  check(!dev.is_cpu(), "compile", "reduce-overhead graphs run on a device; the inputs of ", m.type_name(),
        " are on the CPU");
  const std::string k = key(m, signature);
  std::shared_ptr<Graph> graph;
  bool capture_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(k);
    if (it == entries_.end()) {
      if (entries_.size() >= kMaxKeys) evict_oldest_locked();
      entries_[k].order = made_++;
      ++stats_.warmups;
    } else if (!it->second.refused.empty()) {
      ++stats_.refused;
      stats_.last_refusal = it->second.refused;
    } else if (it->second.graph) {
      graph = it->second.graph;
    } else {
      capture_now = true;
    }
  }
  if (!graph && !capture_now) return body(inputs);  // a warm-up, or a key that cannot be captured

  std::lock_guard<std::mutex> dl(device_lock(dev));
  if (capture_now) {
    auto g = std::make_shared<Graph>();
    std::string why;
    backend::DeviceInterface* di = backend::device_interface(dev.kind);
    if (di) {
      g->work = di->capture(
          dev.index,
          [&] {
            g->in_views.clear();
            g->out_views.clear();
            std::vector<Tensor> statics;
            for (const Tensor& t : inputs) {
              statics.push_back(t.defined() ? Tensor::empty(t.shape(), t.dtype(), t.device()) : Tensor());
              g->in_views.push_back(borrowed_view(statics.back()));
            }
            for (const Tensor& o : body(statics)) g->out_views.push_back(borrowed_view(o));
          },
          &why);
    } else {
      why = "this build has no backend for " + dev.str();
    }
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[k];
    if (!g->work) {
      e.refused = why.empty() ? std::string("the capture failed") : why;
      ++stats_.refused;
      stats_.last_refusal = e.refused;
      std::fprintf(stderr, "diffq compile: %s runs without a device graph for this call: %s\n",
                   m.type_name().c_str(), e.refused.c_str());
    } else if (e.graph) {  // another thread captured this key meanwhile: keep one
      graph = e.graph;
    } else {
      e.graph = g;
      graph = g;
      ++stats_.captures;
      ++stats_.graphs;
    }
  }
  if (!graph) return body(inputs);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.replays;
  }
  return replay(*graph, inputs);
}

std::vector<Tensor> DeviceGraphs::replay(Graph& g, const std::vector<Tensor>& inputs) {
  check(inputs.size() == g.in_views.size(), "compile", "a device graph captured with ", g.in_views.size(),
        " inputs was replayed with ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) ops::copy_into(inputs[i], g.in_views[i]);
  g.work->replay();
  std::vector<Tensor> out;
  out.reserve(g.out_views.size());
  for (const Tensor& v : g.out_views) out.push_back(v.defined() ? v.clone() : Tensor());
  return out;
}

void DeviceGraphs::evict_oldest_locked() {
  auto oldest = entries_.begin();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.order < oldest->second.order) oldest = it;
  if (oldest == entries_.end()) return;
  if (oldest->second.graph) --stats_.graphs;
  entries_.erase(oldest);
}

DeviceGraphStats DeviceGraphs::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace diffq::compile
