// How a module tree is cut into ParamGroups (Diffusers' group_offloading.py):
//   block_level  every ModuleList child of the root is cut into groups of N consecutive blocks, ids
//                "<list>_<first>_<last>"; the parameters of everything else (Flux: embedders,
//                norm_out, proj_out) form one group "<Class>_unmatched_group" that stays onloaded for
//                the whole forward.
//   leaf_level   every module that owns parameters directly is its own group (id = its dotted name;
//                "" for the root). Linear/Conv/Embedding and the norms all go through Module::call.
//   whole        the whole tree as one group (model CPU offload), id = `whole_id`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "offload/param_group.h"

namespace diffq::offload {

struct Partition {
  std::vector<std::unique_ptr<ParamGroup>> groups;
  int resident = -1;  // index of the unmatched group (onloaded for the whole forward), -1: none
};

Partition partition_block_level(Module& root, int64_t blocks_per_group);
Partition partition_leaf_level(Module& root);
Partition partition_whole(Module& root, const std::string& whole_id);

}  // namespace diffq::offload
