// Capture: traces a module's forward on symbolic inputs (ops::Trace) and turns the recording into the
// compiler's Graph. Parameters of the root module become parameter references (by index in
// root.named_parameters()), so the graph can run with any module of the same structure; other real
// tensors met while tracing become constants. One-input layers that do not trace (quantized weights)
// or carry hooks (offloading) become opaque nodes; any other module with hooks is an Error naming it.
#pragma once

#include <functional>
#include <vector>

#include "compile/graph.h"

namespace diffq::compile {

// Calls the root's forward (not its operator(): the root's own hooks are the caller's business).
using ForwardFn = std::function<std::vector<Tensor>(Module& root, const std::vector<Tensor>& inputs)>;

// `examples` give the shapes/dtypes/devices of the inputs (undefined: the optional input is absent).
Graph capture(Module& root, const ForwardFn& fwd, const std::vector<Tensor>& examples);

}  // namespace diffq::compile
