// max-autotune: on the first run of a compiled graph (real inputs at hand), each node for which the
// graph device's compile backend offers candidate kernel tunings (CompileBackend::tuning_candidates; on
// the CPU each linear, matmul and sdpa node, and each linear fused with its elementwise epilogue: GEMM
// split of C over the pool x parts per thread, attention query x key tile sizes,
// backend/cpu/compile/autotune_candidates.h) gets the one that runs fastest on its real operands.
// Candidates are timed interleaved, several rounds, on a scratch output; the median decides, and the
// default is kept unless a candidate beats it by the margin (noise does not flip choices). Choices are
// keyed by the node's signature (op, attributes, operand shapes, strides and dtypes), so identical nodes
// (every block of a regional compile) are timed once, and kept in the cache file (autotune_cache.h)
// under the device's processor key: a later run or process finds them there and times nothing. A graph
// on a device without a compile backend is not tuned (autotune declines: PassStats::declined).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "compile/autotune_cache.h"
#include "compile/compiled_graph.h"

namespace diffq::compile {

struct AutotuneStats {
  int64_t nodes = 0;        // tunable nodes met (more than one candidate: linear / matmul / sdpa on the CPU)
  int64_t tuned = 0;        // node signatures timed
  int64_t candidates = 0;   // candidates timed (each counted once per tuned signature)
  int64_t cache_hits = 0;   // nodes whose choice came from the cache (the file, or a node tuned before)
  int64_t non_default = 0;  // nodes that run with a choice other than the defaults
  double seconds = 0;       // timing candidates + reading and writing the cache file
};

// The signature a choice is keyed by (one line of text).
std::string autotune_node_key(const Node& n, const ops::OpCall& call);

class Autotuner {
 public:
  explicit Autotuner(const CompileOptions& o);

  // Runs `g` (its first run; g.backend is set), giving every tunable node its tuning in g.tuning on the
  // way: from the cache, else by timing candidates on the node's real inputs. New choices are saved to
  // the cache file.
  // Returns the run's outputs. Stats are added to `st`.
  std::vector<Tensor> tune_and_run(CompiledGraph& g, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& params, Module* root, AutotuneStats& st);

  const TuningTable& choices() const { return table_; }  // every choice known (loaded or timed)
  const std::filesystem::path& cache_file() const { return file_; }
  const std::string& processor() const { return processor_; }

 private:
  // kernel(out) runs the node once into `out` under the tuning `device` installed.
  KernelTuning time_candidates(const CompileBackend& device, const std::vector<KernelTuning>& cands,
                               const std::function<void(Tensor&)>& kernel, const BufferMeta& out,
                               AutotuneStats& st) const;

  CompileOptions opt_;
  std::filesystem::path file_;
  std::string processor_;
  bool loaded_ = false;
  TuningTable table_;
};

}  // namespace diffq::compile
