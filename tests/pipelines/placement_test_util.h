// What the fake-device placement tests share: a small generation call, its CPU run to compare with, and
// the check that every op of a run was placed on the device.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "diffq/pipeline.h"
#include "fake_device.h"
#include "ops/ops.h"

namespace diffq::testing {

inline GenerateParams small_call(bool video) {
  GenerateParams g;
  g.prompt = "a red fox";
  g.height = g.width = 32;  // TI2V's smallest: the VAE's spatial factor (16) x the patch size
  if (video) g.num_frames = 5;
  g.num_inference_steps = 2;
  g.max_sequence_length = 16;
  g.seed = 7;
  return g;
}

inline GenerateResult run_on_cpu(const std::filesystem::path& folder, const GenerateParams& g) {
  PipelineOptions po;
  po.dtype = DType::f32;
  auto pipe = DiffusionPipeline::from_pretrained(folder, po);
  return pipe->generate(g);
}

// Every op the generation ran: on the device, with its inputs on the device (to_device aside).
inline void expect_all_on_device(const std::vector<FakeOpRecord>& ops, const std::string& what) {
  for (const auto& r : ops) {
    if (r.kind == ops::OpKind::to_device) continue;
    EXPECT_TRUE(r.out.is_cuda()) << what << ": " << ops::op_name(r.kind) << " ran on " << r.out.str();
    for (const Device& d : r.inputs)
      EXPECT_TRUE(d.is_cuda()) << what << ": " << ops::op_name(r.kind) << " was given a " << d.str() << " input";
  }
  EXPECT_GT(ops.size(), 100u) << what << ": the models' ops were not run on the fake device";
}

}  // namespace diffq::testing
