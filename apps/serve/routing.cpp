#include "routing.h"

#include <tuple>

namespace diffq::serve {

ColdRoute route_cold(const WorkerBeat& me, const std::string& model, const std::vector<WorkerBeat>& live,
                     const std::map<std::string, int64_t>& waiting) {
  std::vector<const WorkerBeat*> workers = {&me};
  for (const auto& w : live)
    if (w.name != me.name) workers.push_back(&w);
  for (const WorkerBeat* w : workers)
    if (w != &me && w->idle() && w->has_loaded(model))
      return {false, "idle worker " + w->name + " has it loaded"};
  auto busyness = [&](const WorkerBeat& w) {
    int64_t queued = 0;
    for (const auto& m : w.loaded)
      if (auto it = waiting.find(m); it != waiting.end()) queued += it->second;
    return std::make_tuple(queued, w.loaded.size(), w.name);
  };
  const auto mine = busyness(me);
  for (const WorkerBeat* w : workers)
    if (w != &me && w->idle() && w->can_serve(model) && busyness(*w) < mine)
      return {false, "idle worker " + w->name + " is less busy"};
  for (const WorkerBeat* w : workers)
    if (w->has_loaded(model)) return {true, "the workers that have it loaded are busy"};
  return {true, "no worker has it loaded"};
}

}  // namespace diffq::serve
