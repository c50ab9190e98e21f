// Prompt adherence of the demo model (models/demo-flux, issue 22): does the image show what the prompt asked?
// The judge is a small CNN of our own (models/demo-flux-classifier, trained by tools/train_demo/classifier.py
// on the same procedural images the demo model learnt from) that reads a 64x64 image and names the objects'
// colour, shape, count and position. A prompt counts as drawn right when all four match.
//
//   auto judge = diffq::AdherenceJudge::load("models/demo-flux-classifier");
//   auto pipe = diffq::DiffusionPipeline::from_pretrained("models/demo-flux");
//   diffq::AdherenceScore s = diffq::check_adherence(*pipe, *judge);   // s.right of s.total (20)
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "diffq/pipeline.h"
#include "diffq/tensor.h"

namespace diffq {

using Attributes = std::map<std::string, std::string>;  // head -> label, e.g. {"colour": "red", "count": "2"}

struct AdherencePrompt {
  std::string prompt;
  uint64_t seed = 0;
  Attributes expected;
};

struct AdherenceScore {
  int64_t right = 0, total = 0;            // prompts with every attribute right
  std::map<std::string, int64_t> per_attribute;  // head -> prompts with that attribute right
  std::vector<Attributes> predicted;       // per prompt, in order
  std::vector<bool> row_right;
};

class AdherenceJudge {
 public:
  // `folder`: model.safetensors + config.json (heads and their labels, input size) + adherence_prompts.json
  // (the fixed prompts, seeds and expected attributes). Errors name the file and the tensor or key.
  static std::unique_ptr<AdherenceJudge> load(const std::filesystem::path& folder);
  // The judge shipped next to a model folder ("<folder>-classifier"), or an empty path when there is none.
  static std::filesystem::path next_to(const std::filesystem::path& model_folder);
  virtual ~AdherenceJudge() = default;

  virtual int64_t image_size() const = 0;                         // 64
  virtual const std::vector<std::string>& heads() const = 0;      // colour, shape, count, position
  virtual const std::vector<AdherencePrompt>& prompts() const = 0;
  // images_u8 [N, S, S, 3] (S = image_size()) -> per image the arg-max label of every head.
  virtual std::vector<Attributes> predict(const Tensor& images_u8) const = 0;
  // The logits of every head, [N, labels] float32 (tests compare them with PyTorch's).
  virtual std::map<std::string, Tensor> logits(const Tensor& images_u8) const = 0;
  // Judges images of prompts() (same order, [prompts().size(), S, S, 3]).
  AdherenceScore score(const Tensor& images_u8) const;
};

// Generates every prompt of judge.prompts() with its seed at the judge's image size (the rest: the pipeline's
// defaults, see generation_defaults.json) and scores the images. `base` supplies anything else (steps, CFG).
// `images_out`, when given, receives the images [N, S, S, 3].
AdherenceScore check_adherence(DiffusionPipeline& pipe, const AdherenceJudge& judge, const GenerateParams& base = {},
                               Tensor* images_out = nullptr);

}  // namespace diffq
