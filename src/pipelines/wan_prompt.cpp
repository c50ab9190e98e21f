#include "pipelines/wan_prompt.h"

#include <algorithm>

#include "diffq/error.h"
#include "ops/ops.h"
#include "tokenizers/prompt_clean.h"

namespace diffq {

Tensor wan_encode_prompt(t5::T5EncoderModel& text_encoder, const tokenizers::T5Tokenizer& tokenizer,
                         const std::vector<std::string>& prompts, int64_t max_sequence_length, DType dtype,
                         int64_t num_videos_per_prompt, Device device) {
  check(!prompts.empty(), "wan", "no prompt given");
  check(max_sequence_length >= 1, "wan", "max_sequence_length must be >= 1, got ", max_sequence_length);
  check(num_videos_per_prompt >= 1, "wan", "num_videos_per_prompt must be >= 1, got ", num_videos_per_prompt);
  const int64_t B = int64_t(prompts.size()), L = max_sequence_length;
  Tensor ids = Tensor::empty({B, L}, DType::i64), mask = Tensor::empty({B, L}, DType::i64);
  std::vector<int64_t> lengths(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    const tokenizers::Encoding e = tokenizer(tokenizers::wan_prompt_clean(prompts[size_t(b)]), int(L));
    std::copy(e.input_ids.begin(), e.input_ids.end(), ids.data<int64_t>() + b * L);
    int64_t* m = mask.data<int64_t>() + b * L;
    for (int64_t s = 0; s < L; ++s) m[s] = e.attention_mask[size_t(s)];
    lengths[size_t(b)] = int64_t(std::count_if(m, m + L, [](int64_t v) { return v > 0; }));
  }
  const Tensor h = text_encoder(ids.to(device), mask.to(device)).to(dtype);  // [B, L, d_model]
  const int64_t D = h.size(2);
  std::vector<Tensor> rows;  // each [1, L, D]: the real tokens, then zeros
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths[size_t(b)];
    Tensor row = h.slice(0, b, b + 1).slice(1, 0, n);  // [1, n, D]
    if (n < L) row = ops::concat({row, Tensor::zeros({1, L - n, D}, dtype, h.device())}, 1);  // [1, L, D]
    for (int64_t r = 0; r < num_videos_per_prompt; ++r) rows.push_back(row);
  }
  return ops::concat(rows, 0).contiguous();  // [B * num_videos_per_prompt, L, D]
}

}  // namespace diffq
