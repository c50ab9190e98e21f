// Which worker loads a model it has not loaded (docs/serve.md, "Routing"). Workers prefer jobs of the models
// they have loaded; a job of a model an idle worker serves but has not loaded is taken by it only when no live
// worker that has the model loaded is idle (that one takes it first), and only by the least busy of the idle
// workers that serve the model. A pure function of the heartbeats (worker_beat.h), so it is tested without
// Redis; it only decides who reads first: a job is completed once whoever runs it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker_beat.h"

namespace diffq::serve {

// A job of a model no worker has taken for this long is taken by any idle worker that serves it, whatever
// the heartbeats say (a worker routing deferred to may have stopped without its record expiring yet, or a
// stream of jobs of loaded models would otherwise keep it waiting).
inline constexpr int64_t kRouteGraceMs = 15000;

struct ColdRoute {
  bool take = false;
  std::string why;  // for the log: why `me` takes it, or which worker it is left to
};

// Whether idle worker `me` (its fresh record; it serves `model` and has not loaded it) takes the next waiting
// job of `model` now. `live`: the live workers' records (`me`'s own, possibly stale, is replaced by `me`);
// `waiting`: jobs waiting per model. Least busy: fewest jobs waiting for the models it has loaded (it takes
// those first), then fewest models loaded (least to evict), then the name.
ColdRoute route_cold(const WorkerBeat& me, const std::string& model, const std::vector<WorkerBeat>& live,
                     const std::map<std::string, int64_t>& waiting);

}  // namespace diffq::serve
