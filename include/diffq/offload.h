// Offload specs, as DiffusionPipeline::enable_offload and the CLI's --offload take them.
#pragma once

#include <string>

namespace diffq {

// Checks an offload spec (model | sequential | group[:N] | leaf | disk[:path]) without a pipeline and
// returns it as enable_offload would apply it ("group:2", "disk"); throws diffq::Error naming the bad part.
std::string check_offload_spec(const std::string& spec);

}  // namespace diffq
