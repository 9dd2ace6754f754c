// SaveRound: one fault-time save, from collecting every node's rank progress to the savers'
// acknowledgements. Pure: no I/O, time passed in. Owned by RendezvousState.
//
//   collecting --all live nodes reported, or collect deadline--> PlanSave
//     no saver possible                       --> done (nobody saves; outcome says why)
//   saving --every saver acked ok--> (several savers: finalizing --finalizer acked-->) done
//   saving/finalizing --a saver failed, died, or the save deadline passed--> done (failed)
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/job_state.h"
#include "rendezvous/save_planner.h"

namespace ftrun::rendezvous {

class SaveRound {
 public:
  enum class Stage { kCollecting, kSaving, kFinalizing, kDone };

  SaveRound(uint64_t id, std::set<std::string> nodes, TimePoint now, Duration collect_timeout,
            Duration save_timeout);

  uint64_t id() const { return id_; }
  Stage stage() const { return stage_; }
  bool done() const { return stage_ == Stage::kDone; }
  bool saved() const { return saved_; }
  const std::optional<SaveDecision>& decision() const { return decision_; }
  int finalizer() const;
  // One line for the logs: what was saved, or why nothing was.
  const std::string& outcome() const { return outcome_; }
  TimePoint deadline() const { return deadline_; }

  void AddProgress(const std::string& node, const std::vector<RankProgress>& ranks, TimePoint now);
  void NodeGone(const std::string& node, const std::vector<int>& ranks, TimePoint now);
  void RankFailed(int rank, TimePoint now);
  // A saver's (or, when finalizing, the finalizer's) answer.
  void AddAck(int rank, bool finalize, bool ok, const std::string& error, TimePoint now);
  void Tick(TimePoint now);

 private:
  void Plan(TimePoint now);
  void Finish(bool saved, const std::string& outcome);
  bool IsSaver(int rank) const;

  uint64_t id_;
  Stage stage_ = Stage::kCollecting;
  std::set<std::string> waiting_for_;
  std::vector<RankProgress> progress_;
  std::optional<SaveDecision> decision_;
  std::set<int> acked_;
  TimePoint started_;
  TimePoint deadline_;
  Duration save_timeout_;
  bool saved_ = false;
  std::string outcome_;
};

}  // namespace ftrun::rendezvous
