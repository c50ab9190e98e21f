// The calling thread's kernel tuning (see tuning.h).
#include "backend/cpu/tuning.h"

namespace diffq::backend::cpu {
namespace {

const Tuning kDefaults{};
thread_local const Tuning* t_current = &kDefaults;

}  // namespace

const Tuning& current_tuning() { return *t_current; }

ScopedTuning::ScopedTuning(const Tuning& t) : prev_(t_current), mine_(t) { t_current = &mine_; }

ScopedTuning::~ScopedTuning() { t_current = prev_; }

}  // namespace diffq::backend::cpu
