// Recording ops into a graph instead of running them. While a Trace object is alive on this thread,
// ops::dispatch appends each call to the trace's graph and returns a symbolic tensor (a view of a
// placeholder storage). Graph::run replays the recorded calls eagerly on real inputs. Real tensors
// used during the trace (parameters) are captured by Storage, so moving their residency later is seen.
#pragma once

#include <vector>

#include "ops/op.h"

namespace diffq::ops {

struct Graph {
  struct Node {
    OpCall call;       // inputs are views of symbolic storages (earlier nodes / graph inputs) or real
    OutputMeta meta;   // the output, a contiguous buffer with symbolic id `id`
    int64_t id;
  };
  std::vector<Tensor> inputs;   // placeholders, contiguous
  std::vector<Node> nodes;
  std::vector<Tensor> outputs;  // views of symbolic (or real) storages

  // Replays the graph eagerly. Inputs must match the placeholders' shapes and dtypes.
  std::vector<Tensor> run(const std::vector<Tensor>& real_inputs) const;
};

class Trace {
 public:
  // record_pieces: an op that stands for a chain of others (mul_add) records that chain instead (the same
  // bits), so a compiler sees the pieces it fuses with their neighbours (compile's capture asks for it);
  // otherwise every op call is recorded as made.
  explicit Trace(bool record_pieces = false);
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // A graph input of this shape/dtype/device.
  Tensor input(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Ends recording; the returned graph produces `outputs`.
  Graph finish(std::vector<Tensor> outputs);

  static Trace* current();  // the active trace on this thread, or nullptr
  bool records_pieces() const { return record_pieces_; }
  Tensor record(OpCall call, const OutputMeta& meta);

 private:
  Graph graph_;
  int64_t next_id_ = 0;
  Trace* previous_ = nullptr;
  bool active_ = true;
  bool record_pieces_ = false;
};

}  // namespace diffq::ops
