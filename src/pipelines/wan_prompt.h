// WanPipeline._get_t5_prompt_embeds (diffusers 0.42.1 pipelines/wan/pipeline_wan.py): each prompt cleaned
// (prompt_clean: ftfy, html.unescape twice, whitespace collapse), tokenized to max_sequence_length with
// padding="max_length", truncation and the eos token, the UMT5 encoder run WITH the attention mask, the output
// cast to `dtype`, each row cut to its real token count (the mask's sum) and zero-padded back to
// max_sequence_length; each row then repeated num_videos_per_prompt times (p0, p0, p1, p1, ...).
#pragma once

#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "models/t5/t5_encoder.h"
#include "tokenizers/t5_tokenizer.h"

namespace diffq {

// -> prompt_embeds [B * num_videos_per_prompt, max_sequence_length, d_model] in `dtype`, on `device` (the
// pipeline's execution device: the token ids and mask are uploaded there).
Tensor wan_encode_prompt(t5::T5EncoderModel& text_encoder, const tokenizers::T5Tokenizer& tokenizer,
                         const std::vector<std::string>& prompts, int64_t max_sequence_length, DType dtype,
                         int64_t num_videos_per_prompt = 1, Device device = Device::cpu());

}  // namespace diffq
