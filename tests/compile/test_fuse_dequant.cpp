// Dequantize inside the GEMM (fuse_epilogue with fuse_dequant): a quantized Linear whose scheme computes
// its linear in parts (on the CPU backend/cpu/quant/linear_q_parts.h: a dequantize-tile + f32 GEMM, or int8dq's int8
// GEMM) becomes the GEMM prologue of the fused node reading its output, like a dense linear, or a
// quantized GEMM node of its own. The tiny FLUX transformer, quantized with each such scheme, compiled
// with the pass on and off: the same bits, no opaque call left with it on; bnb LLM.int8 stays opaque.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "compile/compiled_module.h"
#include "compile_test_util.h"
#include "flux_pass_ab.h"
#include "modules/quantize_on_load.h"
#include "quant/quant_method.h"

using namespace diffq;
using namespace diffq::compile;
using compile_test::max_rel;
using compile_test::same_bits;
using models::flux::FluxTransformer2DModel;

namespace {

// quant shorthand -> the model quantized with it (compute dtype `dtype`).
std::function<void(FluxTransformer2DModel&)> quantize_with(const std::string& scheme, const std::string& dtype) {
  return [scheme, dtype](FluxTransformer2DModel& m) {
    const auto [backend, kwargs] = quant::quant_shorthand(scheme, dtype);
    ASSERT_GT(quantize_module(m, *quant::make_quant_method(backend, kwargs)), 0) << scheme;
  };
}

void off(CompileOptions& o) { o.fuse_dequant = false; }

}  // namespace

// Every scheme family computed in parts: torchao (int8wo, int4wo, fp8wo, fp8dq: dequantized activations
// into the same GEMM; int8dq: the int8 GEMM's parts), bitsandbytes 4-bit, quanto, GGUF. The f32 model.
TEST(FuseDequant, QuantizedFluxSameBitsWithAndWithoutThePass) {
  for (const char* scheme : {"int8wo", "int4wo", "fp8wo", "fp8dq", "int8dq", "nf4", "fp4", "quanto-int8", "quanto-int4",
                             "q8_0", "q4_K"}) {
    SCOPED_TRACE(scheme);
    const compile_test::FluxPassAB r = compile_test::flux_pass_ab(off, quantize_with(scheme, "float32"));
    EXPECT_TRUE(same_bits(r.y_on, r.y_off)) << max_rel(r.y_on, r.y_off);
    EXPECT_LE(max_rel(r.y_on, r.eager), 1e-5);
    EXPECT_EQ(r.s_off.fused_dequant, 0);
    // FLUX's quantized linears read once by an elementwise op: the FeedForward's GELU linear, the gated
    // residuals after to_out / to_add_out / ff / ff_context / proj_out, the single blocks' proj_mlp.
    // The others (q/k/v, the single blocks' ...) become quantized GEMM nodes of their own: no opaque call is
    // left, one quantized prologue per quantized linear.
    EXPECT_GT(r.s_off.opaque_nodes, 0);
    EXPECT_EQ(r.s_on.opaque_nodes, 0);
    EXPECT_EQ(r.s_on.fused_dequant, r.s_off.opaque_nodes);
    EXPECT_GT(r.s_on.fused_epilogues, r.s_off.fused_epilogues);
  }
}

// The scheme's own roundings are kept: bnb 4-bit computing in bf16 under an f32 model (x rounded to bf16,
// the result rounded to bf16 then back to f32), GGUF with a bf16 compute dtype (its bias rounded).
TEST(FuseDequant, SchemeComputeDtypeRoundingsAreKept) {
  for (const char* scheme : {"nf4", "q8_0"}) {
    SCOPED_TRACE(scheme);
    const compile_test::FluxPassAB r = compile_test::flux_pass_ab(off, quantize_with(scheme, "bfloat16"));
    EXPECT_TRUE(same_bits(r.y_on, r.y_off)) << max_rel(r.y_on, r.y_off);
    EXPECT_GT(r.s_on.fused_dequant, 0);
  }
}

// A bf16 model: int8dq's epilogue rounds to bf16 twice (after the activation scale, at the end), the
// tile schemes round the result once; the fused parts carry those roundings.
TEST(FuseDequant, Bf16ModelSameBitsWithAndWithoutThePass) {
  for (const char* scheme : {"int8dq", "int8wo", "q8_0"}) {
    SCOPED_TRACE(scheme);
    LoadOptions bf16;
    bf16.dtype = DType::bf16;
    const compile_test::FluxPassAB r = compile_test::flux_pass_ab(off, quantize_with(scheme, "bfloat16"), bf16);
    EXPECT_EQ(r.y_on.dtype(), DType::bf16);
    EXPECT_TRUE(same_bits(r.y_on, r.y_off)) << max_rel(r.y_on, r.y_off);
    EXPECT_EQ(r.s_on.opaque_nodes, 0);
    EXPECT_GT(r.s_on.fused_dequant, 0);
  }
}

// bnb int8 (LLM.int8: outlier columns in f16, the rest int8 x int8) cannot deliver parts: its linears stay
// opaque, and the pass changes nothing.
TEST(FuseDequant, LlmInt8StaysOpaque) {
  const compile_test::FluxPassAB r = compile_test::flux_pass_ab(off, quantize_with("int8", "float32"));
  EXPECT_TRUE(same_bits(r.y_on, r.y_off));
  EXPECT_EQ(r.s_on.fused_dequant, 0);
  EXPECT_EQ(r.s_on.opaque_nodes, r.s_off.opaque_nodes);
  EXPECT_GT(r.s_on.opaque_nodes, 0);
}

// Regional compilation replays one captured block graph for every block: each fused node's quantized GEMM
// must be the weight of the block being run, not of the block captured.
TEST(FuseDequant, RegionalCompileUsesEachBlocksOwnWeights) {
  auto model = FluxTransformer2DModel::from_pretrained(compile_test::tiny_flux_dir() / "transformer");
  quantize_with("q8_0", "float32")(*model);
  auto run = [&] { return compile_test::run_flux_fixture(*model); };
  ASSERT_GE(model->single_transformer_blocks.size(), 2u);
  CompileOptions no;
  no.fullgraph = true;
  off(no);
  model->compile_repeated_blocks(no);
  const Tensor unfused = run();
  CompileOptions o;
  o.fullgraph = true;
  model->compile_repeated_blocks(o);
  const Tensor fused = run();
  EXPECT_TRUE(same_bits(fused, unfused)) << max_rel(fused, unfused);
  int64_t dequant = 0;
  for (const auto* m : model->compiled_modules()) dequant += m->stats().last_passes.fused_dequant;
  EXPECT_GT(dequant, 0);
  model->uncompile();
  EXPECT_LE(max_rel(fused, run()), 1e-5);
}

// max-autotune times the dense nodes and leaves the quantized GEMM prologues on their scheme's kernel.
TEST(FuseDequant, MaxAutotuneRunsQuantizedProloguesUntuned) {
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("diffq_fuse_dequant_" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(cache);
  auto model = FluxTransformer2DModel::from_pretrained(compile_test::tiny_flux_dir() / "transformer");
  quantize_with("int8wo", "float32")(*model);
  auto run = [&] { return compile_test::run_flux_fixture(*model); };
  const Tensor eager = run();
  CompileOptions o;
  o.fullgraph = true;
  o.mode = CompileMode::max_autotune;
  o.autotune_cache = cache.string();
  o.autotune_reps = 1;
  o.autotune_max_candidates = 2;
  model->compile(o);
  EXPECT_LE(max_rel(run(), eager), 1e-5);
  const CompiledModule& cm = *model->compiled_modules()[0];
  EXPECT_GT(cm.stats().last_passes.fused_dequant, 0);
  EXPECT_GT(cm.stats().autotune.nodes, 0);  // the dense nodes were tuned
  int64_t quantized_keys = 0;
  for (const auto& [key, t] : cm.autotune_choices()) quantized_keys += key.find("qlinear(") != std::string::npos;
  EXPECT_FALSE(cm.autotune_choices().empty());
  EXPECT_EQ(quantized_keys, 0);
  std::filesystem::remove(cache);
}
