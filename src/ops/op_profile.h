// Per-op wall-clock profile of eager execution, for finding where a forward spends its time.
// Enabled by the environment variable DIFFQ_PROFILE_OPS=1: every ops::execute call is timed and a
// table (op, output dtype, calls, total ms, share) is printed to stderr when the process exits.
#pragma once

#include "ops/op.h"

namespace diffq::ops {

bool op_profile_enabled();  // DIFFQ_PROFILE_OPS set and not "0"; read once
void op_profile_record(OpKind kind, DType dtype, double seconds);

}  // namespace diffq::ops
