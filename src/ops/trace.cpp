#include "ops/trace.h"

#include <unordered_map>

#include "diffq/error.h"

namespace diffq::ops {

namespace {
thread_local Trace* g_current = nullptr;

// Rebuilds a recorded view on the real storage that now stands for its symbolic buffer.
Tensor resolve(const Tensor& t, const std::vector<std::shared_ptr<Storage>>& values) {
  if (!t.defined() || !t.is_symbolic()) return t;
  const auto& s = values.at(size_t(t.storage()->symbolic_id()));
  check(s != nullptr, "graph", "buffer ", t.storage()->symbolic_id(), " used before it was computed");
  return Tensor(s, t.shape(), t.strides(), t.offset(), t.dtype());
}
}  // namespace

Trace::Trace(bool record_pieces) : previous_(g_current), record_pieces_(record_pieces) { g_current = this; }

Trace::~Trace() {
  if (active_) g_current = previous_;
}

Trace* Trace::current() { return g_current; }

Tensor Trace::input(const Shape& shape, DType dtype, Device device) {
  const int64_t id = next_id_++;
  auto st = Storage::symbolic(id, size_t(shape_numel(shape)) * dtype_size(dtype), device);
  Tensor t(st, shape, contiguous_strides(shape), 0, dtype);
  graph_.inputs.push_back(t);
  return t;
}

Tensor Trace::record(OpCall call, const OutputMeta& meta) {
  const int64_t id = next_id_++;
  auto st = Storage::symbolic(id, size_t(shape_numel(meta.shape)) * dtype_size(meta.dtype), meta.device);
  graph_.nodes.push_back({std::move(call), meta, id});
  return Tensor(st, meta.shape, contiguous_strides(meta.shape), 0, meta.dtype);
}

Graph Trace::finish(std::vector<Tensor> outputs) {
  check(active_, "trace", "finish() called twice");
  active_ = false;
  g_current = previous_;
  graph_.outputs = std::move(outputs);
  return std::move(graph_);
}

std::vector<Tensor> Graph::run(const std::vector<Tensor>& real_inputs) const {
  check(real_inputs.size() == inputs.size(), "graph", "expects ", inputs.size(), " inputs, got ",
        real_inputs.size());
  int64_t max_id = -1;
  for (const Tensor& t : inputs) max_id = std::max(max_id, t.storage()->symbolic_id());
  for (const Node& n : nodes) max_id = std::max(max_id, n.id);
  std::vector<std::shared_ptr<Storage>> values(size_t(max_id + 1));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& ph = inputs[i];
    check(real_inputs[i].shape() == ph.shape() && real_inputs[i].dtype() == ph.dtype(), "graph",
          "input ", i, " is ", real_inputs[i].str(), " but the graph was traced with ", ph.str());
    const Tensor real = real_inputs[i].contiguous();
    values[size_t(ph.storage()->symbolic_id())] =
        real.offset() == 0 ? real.storage() : real.clone().storage();
  }
  for (const Node& n : nodes) {
    OpCall call = n.call;
    for (Tensor& t : call.inputs) t = resolve(t, values);
    values[size_t(n.id)] = execute(call).storage();
  }
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (const Tensor& t : outputs) out.push_back(resolve(t, values));
  return out;
}

}  // namespace diffq::ops
