// The residency engine of group offloading for one module tree (Diffusers' apply_group_offloading).
//
// Setup: the tree is cut into ParamGroups (group_partition.h); each gets a home (host, pinned host or a
// hash-keyed disk file) and starts offloaded. Hooks on the group's modules onload the group before
// its first module runs and offload it after its last one; the root's hook onloads the resident
// (unmatched) group for the whole forward and marks passes.
//
// Order and prefetch: the first forward records the order in which groups are onloaded. From then on
// (use_stream), when group order[k] is onloaded, order[k+1] is fetched in the background (CPU: the
// prefetch thread reads the disk file into a pool buffer; CUDA: a side-stream copy) and the next
// onload waits for that fetch. A group called out of the recorded order is onloaded synchronously
// (counted in stats().out_of_order); a prefetched group that was not used is dropped. So at most the
// current and the prefetched group are resident besides the unmatched one.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "offload/buffer_pool.h"
#include "offload/disk_home.h"
#include "offload/group_partition.h"
#include "offload/offload_hook.h"
#include "offload/offload_options.h"
#include "offload/prefetcher.h"

namespace diffq::offload {

struct GroupOffloadStats {
  int64_t passes = 0;              // root forwards completed
  int64_t onloads = 0;             // group onloads (resident group included)
  int64_t sync_onloads = 0;        // onloads that fetched on the caller's thread
  int64_t prefetched_onloads = 0;  // onloads served by a prefetch
  int64_t prefetches = 0;          // prefetches issued
  int64_t prefetches_dropped = 0;  // prefetched but not used next
  int64_t out_of_order = 0;        // onloads that did not follow the recorded order
  int64_t max_onloaded_groups = 0; // max groups onloaded or in flight at once, resident group excluded
  int64_t max_onloaded_bytes = 0;  // their packed bytes
  int64_t files_written = 0, files_reused = 0, stale_files_replaced = 0, disk_bytes_read = 0;
  BufferPoolStats pool;
};

class GroupOffloader : public std::enable_shared_from_this<GroupOffloader> {
 public:
  // Validates `o`, refuses a tree that already has offloading (Diffusers' errors), builds the groups,
  // moves every group to its home and attaches the hooks. `kind` = sequential gives Diffusers'
  // enable_sequential_cpu_offload (leaf groups, synchronous).
  static std::shared_ptr<GroupOffloader> apply(Module& root, const GroupOffloadOptions& o,
                                               OffloadKind kind = OffloadKind::group);
  ~GroupOffloader();
  GroupOffloader(const GroupOffloader&) = delete;
  GroupOffloader& operator=(const GroupOffloader&) = delete;

  // Removes the hooks and brings every byte back into ordinary host memory.
  void remove();

  const std::vector<std::unique_ptr<ParamGroup>>& groups() const { return part_.groups; }
  int resident_group() const { return part_.resident; }
  int find_group(const std::string& id) const;  // -1 when absent
  const std::vector<int>& execution_order() const { return order_; }
  bool order_recorded() const { return recorded_; }
  const GroupOffloadOptions& options() const { return opt_; }
  OffloadKind kind() const { return kind_; }
  GroupOffloadStats stats() const;
  // When on, every onload/offload/prefetch appends "onload <id>" / "offload <id>" / "prefetch <id>".
  bool trace_events = false;
  std::vector<std::string> events;

  // Called by the hooks.
  void root_pre();
  void root_post();
  void group_pre(int g);
  void group_post(int g);

 private:
  GroupOffloader(Module& root, const GroupOffloadOptions& o, OffloadKind kind);
  void onload(int g);
  void offload(int g);
  void prefetch(int g);
  void drop_pending();
  void note_onloaded();
  void log(const char* what, int g);

  Module* root_;
  GroupOffloadOptions opt_;
  OffloadKind kind_;
  Partition part_;
  std::shared_ptr<BufferPool> pool_;
  std::shared_ptr<DiskFileCounters> disk_;
  std::shared_ptr<DeviceStaging> staging_;  // disk homes onto an accelerator: their page-locked chunk
  std::vector<int> order_;
  std::vector<char> seen_this_pass_;
  bool recorded_ = false;
  bool in_pass_ = false;
  size_t pos_ = 0;
  int pending_group_ = -1;
  std::shared_future<std::shared_ptr<PoolBuffer>> pending_;
  GroupOffloadStats stats_;
  bool removed_ = false;
  std::unique_ptr<Prefetcher> prefetcher_;  // last: destroyed first (its jobs use the groups)
};

}  // namespace diffq::offload
