// Who saves at fault time (MindIO TTP's "good cards", DLRover's save-at-breakpoint): a pure
// function of what every rank last reported.
//
// A rank can save step S when it is healthy (alive, not the failed or hung one), has a save
// handler, and its last report is "update finished" at S (not in the middle of an optimizer
// update). S is the newest step that every replica group can provide; each group's saver is
// its lowest such rank. With no group able to provide a common step, nobody saves and the
// reason says why.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rendezvous/job_state.h"

namespace ftrun::rendezvous {

struct SaveDecision {
  int64_t step = -1;
  std::vector<Saver> savers;  // one per replica group, ordered by group
};

// Either a decision or (in `why_not`) one sentence saying why nobody can save.
struct SavePlanResult {
  std::optional<SaveDecision> decision;
  std::string why_not;
};

SavePlanResult PlanSave(const std::vector<RankProgress>& ranks);

}  // namespace ftrun::rendezvous
