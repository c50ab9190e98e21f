// FluxPipeline.encode_prompt: text -> token ids (CLIP 77, T5 max_sequence_length) -> embeddings.
#include "diffq/error.h"
#include "pipelines/flux_pipeline.h"

namespace diffq {

namespace {
Tensor ids_tensor(const std::vector<std::vector<int64_t>>& rows) {
  const int64_t b = int64_t(rows.size()), s = int64_t(rows.at(0).size());
  Tensor t = Tensor::empty({b, s}, DType::i64);
  auto* p = t.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    check(int64_t(rows[i].size()) == s, "flux", "token rows differ in length");
    std::copy(rows[i].begin(), rows[i].end(), p + i * s);
  }
  return t;
}
}  // namespace

FluxPromptEmbeds FluxPipeline::encode_prompt(const std::vector<std::string>& prompts,
                                             const std::vector<std::string>& prompts_2,
                                             int64_t max_sequence_length) {
  check(tokenizer && tokenizer_2, "flux", "encode_prompt needs the tokenizer and tokenizer_2 components");
  check(!prompts.empty(), "flux", "no prompt given");
  check(prompts_2.empty() || prompts_2.size() == prompts.size(), "flux", "prompt_2 has ", prompts_2.size(),
        " entries but prompt has ", prompts.size());
  check(max_sequence_length > 0 && max_sequence_length <= 512, "flux",
        "max_sequence_length must be in 1..512, got ", max_sequence_length);
  std::vector<std::vector<int64_t>> clip_rows, t5_rows;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clip_rows.push_back((*tokenizer)(prompts[i]).input_ids);  // padded/truncated to model_max_length
    const std::string& p2 = prompts_2.empty() ? prompts[i] : prompts_2[i];
    t5_rows.push_back((*tokenizer_2)(p2, int(max_sequence_length)).input_ids);
  }
  return encode_prompt_ids(ids_tensor(clip_rows), ids_tensor(t5_rows));
}

}  // namespace diffq
