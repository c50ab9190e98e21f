#include "offload/model_offload.h"

#include "diffq/error.h"
#include "diffq/memory.h"
#include "offload/device_host_home.h"
#include "offload/group_partition.h"
#include "offload/offload_hook.h"

namespace diffq::offload {

namespace {
class ModelOffloadHook final : public OffloadHook {
 public:
  ModelOffloadHook(std::shared_ptr<ModelOffloadChain> c, int k) : c_(std::move(c)), k_(k) {}
  OffloadKind kind() const override { return OffloadKind::model; }
  void pre_forward(Module&) override { c_->activate(k_); }

 private:
  std::shared_ptr<ModelOffloadChain> c_;
  int k_;
};
}  // namespace

std::shared_ptr<ModelOffloadChain> ModelOffloadChain::apply(const NamedModules& seq, const NamedModules& others,
                                                            const ModelOffloadOptions& o) {
  std::shared_ptr<ModelOffloadChain> c(new ModelOffloadChain());
  c->pool_ = BufferPool::create(o.device, 1);
  c->num_chained_ = seq.size();
  NamedModules all = seq;
  all.insert(all.end(), others.begin(), others.end());
  for (const auto& [name, m] : all) {
    check(m != nullptr, "offload", "model CPU offload: component '", name, "' is null");
    if (auto k = active_offload(*m))
      fail("offload", "component '", name, "' already has ", offload_kind_name(*k), "; remove it first");
    auto part = partition_whole(*m, name);
    auto g = std::move(part.groups.front());
    if (!o.offload_to_disk_path.empty())
      g->set_home(std::make_unique<DiskHome>(o.offload_to_disk_path, o.config_fingerprint + "|" + name, c->disk_));
    else if (o.device.is_cuda())
      g->set_home(make_device_host_home(o.device, false));
    else
      g->set_home(std::make_unique<HostHome>());
    g->home().adopt(*g);
    if (g->home().moves_bytes()) g->set_residency(g->home().home_residency());
    c->groups_.push_back(std::move(g));
    c->roots_.push_back(m);
  }
  return_freed_memory_to_os();  // the weights' old host bytes were just released
  for (int k = 0; k < int(c->roots_.size()); ++k) c->roots_[size_t(k)]->add_hook(std::make_shared<ModelOffloadHook>(c, k));
  return c;
}

void ModelOffloadChain::onload(int k) {
  ParamGroup& g = *groups_[size_t(k)];
  if (g.onloaded) return;
  if (auto buf = g.home().fetch(g, *pool_)) g.attach(buf);
  if (g.home().moves_bytes()) g.set_residency(g.home().onloaded_residency());
  g.onloaded = true;
  events_.push_back("onload " + g.id());
  int64_t bytes = 0;
  for (const auto& x : groups_)
    if (x->onloaded) bytes += int64_t(x->packed_bytes());
  max_onloaded_bytes_ = std::max(max_onloaded_bytes_, bytes);
}

void ModelOffloadChain::offload(int k) {
  ParamGroup& g = *groups_[size_t(k)];
  if (!g.onloaded) return;
  g.home().release(g);
  if (g.home().moves_bytes()) g.set_residency(g.home().home_residency());
  g.onloaded = false;
  events_.push_back("offload " + g.id());
}

void ModelOffloadChain::activate(int k) {
  if (removed_) return;
  if (k > 0 && size_t(k) < num_chained_) offload(k - 1);  // the previous hook in the chain
  onload(k);
}

void ModelOffloadChain::offload_all() {
  if (removed_) return;
  for (int k = 0; k < int(groups_.size()); ++k) offload(k);
}

void ModelOffloadChain::remove() {
  if (removed_) return;
  offload_all();
  for (Module* m : roots_) remove_offload_hooks(*m);
  for (auto& g : groups_) {
    g->home().restore(*g);
    if (g->home().moves_bytes()) g->set_residency(Residency::host);
  }
  removed_ = true;
  pool_->trim();
}

bool ModelOffloadChain::is_onloaded(const std::string& name) const {
  for (const auto& g : groups_)
    if (g->id() == name) return g->onloaded;
  fail("offload", "model CPU offload has no component '", name, "'");
}

}  // namespace diffq::offload
