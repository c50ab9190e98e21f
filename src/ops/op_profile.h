// Per-op wall-clock profile of eager execution, for finding where a forward spends its time.
// Enabled by the environment variable DIFFQ_PROFILE_OPS=1: every ops::execute call is timed and a
// table (op, output dtype, calls, total ms, share) is printed to stderr when the process exits.
// DIFFQ_PROFILE_OPS=shapes keys the table by the inputs' shapes too (one row per op, dtype and input
// shapes), with GFLOP/s for linear and sdpa.
#pragma once

#include <cstdint>
#include <string>

#include "ops/op.h"

namespace diffq::ops {

bool op_profile_enabled();  // DIFFQ_PROFILE_OPS set and not "0"; read once
bool op_profile_shapes();   // DIFFQ_PROFILE_OPS=shapes
// `shapes`: the inputs' shapes ("" unless op_profile_shapes()); `flops`: the call's floating-point
// operations where known (linear, sdpa), else 0.
void op_profile_record(OpKind kind, DType dtype, const std::string& shapes, double flops, double seconds);
// Forgets every call recorded so far (diffq::reset_op_profile; diffq bench after its warm-up); the number
// of calls recorded since the start or the last reset.
void op_profile_reset();
int64_t op_profile_calls();
// The row key and flop count of a call for the shapes mode.
std::string op_profile_shapes_of(const OpCall& call);
double op_profile_flops(const OpCall& call);

}  // namespace diffq::ops
