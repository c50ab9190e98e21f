// The public CompileReport (diffq/pipeline.h) of a model's compiled modules: what --compile did.
#pragma once

#include <vector>

#include "compile/compiled_module.h"
#include "diffq/pipeline.h"

namespace diffq {

// compiled = false when `mods` is empty; the autotune figures count when `autotune`.
DiffusionPipeline::CompileReport make_compile_report(const std::vector<const compile::CompiledModule*>& mods,
                                                     bool autotune);

}  // namespace diffq
