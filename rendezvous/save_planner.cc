#include "rendezvous/save_planner.h"

#include <algorithm>
#include <map>
#include <set>

namespace ftrun::rendezvous {

SavePlanResult PlanSave(const std::vector<RankProgress>& ranks) {
  SavePlanResult out;
  // group -> step -> lowest rank able to save that step
  std::map<std::string, std::map<int64_t, int>> offers;
  std::set<std::string> groups;
  for (const auto& r : ranks) {
    if (!r.has_handler) continue;
    groups.insert(r.group);
    if (!r.healthy || r.updating || r.step < 0) continue;
    auto& by_step = offers[r.group];
    auto it = by_step.find(r.step);
    if (it == by_step.end() || r.rank < it->second) by_step[r.step] = r.rank;
  }
  if (groups.empty()) {
    out.why_not = "no rank registered a save handler";
    return out;
  }
  std::optional<std::set<int64_t>> common;
  for (const auto& g : groups) {
    auto it = offers.find(g);
    if (it == offers.end()) {
      out.why_not =
          "replica group '" + g + "' has no healthy member whose last optimizer update finished";
      return out;
    }
    std::set<int64_t> steps;
    for (const auto& [step, rank] : it->second) steps.insert(step);
    if (!common) {
      common = steps;
    } else {
      std::set<int64_t> both;
      std::set_intersection(common->begin(), common->end(), steps.begin(), steps.end(),
                            std::inserter(both, both.begin()));
      common = both;
    }
  }
  if (common->empty()) {
    out.why_not = "the replica groups have no finished step in common";
    return out;
  }
  SaveDecision d;
  d.step = *common->rbegin();
  for (const auto& g : groups) d.savers.push_back({offers[g][d.step], g});
  out.decision = d;
  return out;
}

}  // namespace ftrun::rendezvous
