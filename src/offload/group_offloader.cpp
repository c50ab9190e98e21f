#include "offload/group_offloader.h"

#include <algorithm>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "offload/device_host_home.h"

namespace diffq::offload {

namespace {
constexpr const char* kCtx = "offload";

class GroupModuleHook final : public OffloadHook {
 public:
  GroupModuleHook(std::shared_ptr<GroupOffloader> e, int g, bool last) : e_(std::move(e)), g_(g), last_(last) {}
  OffloadKind kind() const override { return e_->kind(); }
  void pre_forward(Module&) override { e_->group_pre(g_); }
  void post_forward(Module&) override {
    if (last_) e_->group_post(g_);
  }

 private:
  std::shared_ptr<GroupOffloader> e_;
  int g_;
  bool last_;
};

class RootHook final : public OffloadHook {
 public:
  explicit RootHook(std::shared_ptr<GroupOffloader> e) : e_(std::move(e)) {}
  OffloadKind kind() const override { return e_->kind(); }
  void pre_forward(Module&) override { e_->root_pre(); }
  void post_forward(Module&) override { e_->root_post(); }

 private:
  std::shared_ptr<GroupOffloader> e_;
};

std::unique_ptr<GroupHome> make_home(const GroupOffloadOptions& o, const std::shared_ptr<DiskFileCounters>& c,
                                     std::shared_ptr<DeviceStaging>& staging) {
  if (!o.offload_to_disk_path.empty()) {
    if (!o.onload_device.is_cpu() && !staging) staging = DeviceStaging::of(o.onload_device);
    return std::make_unique<DiskHome>(o.offload_to_disk_path, o.config_fingerprint, c, o.drop_page_cache,
                                      o.onload_device.is_cpu() ? nullptr : staging);
  }
  if (o.onload_device.is_cuda()) return make_device_host_home(o.onload_device, o.low_cpu_mem_usage);
  return std::make_unique<HostHome>();
}
}  // namespace

GroupOffloader::GroupOffloader(Module& root, const GroupOffloadOptions& o, OffloadKind kind)
    : root_(&root), opt_(o), kind_(kind), disk_(std::make_shared<DiskFileCounters>()) {}

std::shared_ptr<GroupOffloader> GroupOffloader::apply(Module& root, const GroupOffloadOptions& o, OffloadKind kind) {
  validate_group_offload_options(o);
  if (auto k = active_offload(root)) {
    if (kind == OffloadKind::group && *k != OffloadKind::group)
      fail(kCtx, "Cannot apply group offloading to a module that is already applying an alternative offloading "
                 "strategy from Accelerate. If you want to apply group offloading, please disable the existing "
                 "offloading strategy first. (", root.type_name(), " has ", offload_kind_name(*k), ")");
    if (kind != OffloadKind::group && *k == OffloadKind::group)
      fail(kCtx, "You are trying to apply model/sequential CPU offloading to a pipeline that contains components "
                 "with group offloading enabled. This is not supported. Please disable group offloading for "
                 "components of the pipeline to use other offloading methods. (", root.type_name(), ")");
    fail(kCtx, root.type_name(), " already has ", offload_kind_name(*k), "; remove it first");
  }
  std::shared_ptr<GroupOffloader> e(new GroupOffloader(root, o, kind));
  e->part_ = (kind == OffloadKind::sequential || o.offload_type == OffloadType::leaf_level)
                 ? partition_leaf_level(root)
                 : partition_block_level(root, *o.num_blocks_per_group);
  e->pool_ = BufferPool::create(o.onload_device);
  e->seen_this_pass_.assign(e->part_.groups.size(), 0);
  for (auto& g : e->part_.groups) {
    g->set_home(make_home(o, e->disk_, e->staging_));
    g->home().adopt(*g);
    if (g->home().moves_bytes()) g->set_residency(g->home().home_residency());
  }
  return_freed_memory_to_os();  // the weights' old host bytes were just released
  if (o.use_stream && kind == OffloadKind::group) e->prefetcher_ = std::make_unique<Prefetcher>();
  root.add_hook(std::make_shared<RootHook>(e));
  for (int gi = 0; gi < int(e->part_.groups.size()); ++gi) {
    if (gi == e->part_.resident) continue;  // onloaded by the root hook
    const auto& mods = e->part_.groups[gi]->modules();
    for (size_t j = 0; j < mods.size(); ++j)
      mods[j]->add_hook(std::make_shared<GroupModuleHook>(e, gi, j + 1 == mods.size()));
  }
  return e;
}

GroupOffloader::~GroupOffloader() {
  if (pending_.valid()) pending_.wait();
}

int GroupOffloader::find_group(const std::string& id) const {
  for (size_t i = 0; i < part_.groups.size(); ++i)
    if (part_.groups[i]->id() == id) return int(i);
  return -1;
}

void GroupOffloader::log(const char* what, int g) {
  if (trace_events) events.push_back(std::string(what) + " " + part_.groups[size_t(g)]->id());
}

void GroupOffloader::note_onloaded() {
  int64_t n = 0, bytes = 0;
  for (size_t i = 0; i < part_.groups.size(); ++i)
    if (int(i) != part_.resident && (part_.groups[i]->onloaded || int(i) == pending_group_)) {
      ++n;
      bytes += int64_t(part_.groups[i]->packed_bytes());
    }
  stats_.max_onloaded_groups = std::max(stats_.max_onloaded_groups, n);
  stats_.max_onloaded_bytes = std::max(stats_.max_onloaded_bytes, bytes);
}

void GroupOffloader::drop_pending() {
  if (pending_group_ < 0) return;
  try {
    pending_.get();  // the buffer goes back to the pool when this result is dropped
  } catch (...) {
  }
  pending_ = {};
  pending_group_ = -1;
  ++stats_.prefetches_dropped;
}

void GroupOffloader::prefetch(int g) {
  ParamGroup& grp = *part_.groups[size_t(g)];
  if (!prefetcher_ || grp.onloaded || pending_group_ == g || !grp.home().moves_bytes()) return;
  drop_pending();
  pending_group_ = g;
  ParamGroup* gp = &grp;
  BufferPool* pool = pool_.get();
  pending_ = prefetcher_->submit([gp, pool] { return gp->home().fetch(*gp, *pool); });
  ++stats_.prefetches;
  log("prefetch", g);
  note_onloaded();
}

void GroupOffloader::onload(int g) {
  ParamGroup& grp = *part_.groups[size_t(g)];
  if (grp.onloaded) return;
  std::shared_ptr<PoolBuffer> buf;
  if (pending_group_ == g) {
    auto fut = std::move(pending_);
    pending_ = {};
    pending_group_ = -1;
    buf = fut.get();  // rethrows a failed read, naming the group and file
    ++stats_.prefetched_onloads;
  } else {
    buf = grp.home().fetch(grp, *pool_);
    ++stats_.sync_onloads;
  }
  if (buf) grp.attach(buf);
  if (grp.home().moves_bytes()) grp.set_residency(grp.home().onloaded_residency());
  grp.onloaded = true;
  ++stats_.onloads;
  log("onload", g);
  note_onloaded();
}

void GroupOffloader::offload(int g) {
  ParamGroup& grp = *part_.groups[size_t(g)];
  if (!grp.onloaded) return;
  grp.home().release(grp);
  if (grp.home().moves_bytes()) grp.set_residency(grp.home().home_residency());
  grp.onloaded = false;
  log("offload", g);
}

void GroupOffloader::root_pre() {
  if (removed_) return;
  in_pass_ = true;
  pos_ = 0;
  std::fill(seen_this_pass_.begin(), seen_this_pass_.end(), 0);
  if (recorded_ && !order_.empty()) prefetch(order_[0]);  // overlaps the resident group's read
  if (part_.resident >= 0) onload(part_.resident);
}

void GroupOffloader::root_post() {
  if (removed_) return;
  for (size_t i = 0; i < part_.groups.size(); ++i) offload(int(i));
  if (in_pass_ && !order_.empty()) recorded_ = true;
  in_pass_ = false;
  ++stats_.passes;
}

void GroupOffloader::group_pre(int g) {
  if (removed_) return;
  if (in_pass_ && !seen_this_pass_[size_t(g)]) {
    seen_this_pass_[size_t(g)] = 1;
    if (!recorded_) {
      order_.push_back(g);
    } else if (pos_ < order_.size() && order_[pos_] == g) {
      ++pos_;
    } else {
      ++stats_.out_of_order;
      auto it = std::find(order_.begin(), order_.end(), g);
      if (it != order_.end()) pos_ = size_t(it - order_.begin()) + 1;
    }
  }
  onload(g);
  if (recorded_ && in_pass_ && pos_ < order_.size()) prefetch(order_[pos_]);
}

void GroupOffloader::group_post(int g) {
  if (removed_ || g == part_.resident) return;
  offload(g);
}

void GroupOffloader::remove() {
  if (removed_) return;
  if (pending_group_ >= 0) {
    drop_pending();
    --stats_.prefetches_dropped;
  }
  remove_offload_hooks(*root_);
  for (auto& g : part_.groups) {
    if (g->onloaded) {
      g->home().release(*g);
      g->onloaded = false;
    }
    g->home().restore(*g);
    if (g->home().moves_bytes()) g->set_residency(Residency::host);
  }
  removed_ = true;
  pool_->trim();
}

GroupOffloadStats GroupOffloader::stats() const {
  GroupOffloadStats s = stats_;
  s.files_written = disk_->written;
  s.files_reused = disk_->reused;
  s.stale_files_replaced = disk_->stale_replaced;
  s.disk_bytes_read = disk_->bytes_read;
  s.pool = pool_->stats();
  return s;
}

}  // namespace diffq::offload
