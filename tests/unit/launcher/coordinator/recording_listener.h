// A Coordinator::Listener that records each call as a short string ("start 1", "restart
// why", "save 1/4", ...), for the coordinator and view-follower tests.
#pragma once

#include <string>
#include <vector>

#include "launcher/coordinator/coordinator.h"

namespace ftrun::testing {

using launcher::JobResult;

// Records the listener calls as short strings, e.g. "start 1", "restart", "save 1/4".
class Recorder : public launcher::Coordinator::Listener {
 public:
  void OnRoundStarted(const rendezvous::NodeAssignment& a) override {
    calls.push_back("start " + std::to_string(a.round));
  }
  void OnRestartRequested(const std::string& reason) override {
    calls.push_back("restart " + reason);
  }
  void OnJobFinished(const JobResult& r) override {
    calls.push_back(r.succeeded ? "succeeded" : "failed " + r.reason);
  }
  void OnSaveOrder(uint64_t round, const rendezvous::SaveOrder& o) override {
    calls.push_back("save " + std::to_string(round) + "/" + std::to_string(o.id));
  }
  void OnRoundStopping(uint64_t round, const std::string&, int) override {
    calls.push_back("stopping " + std::to_string(round));
  }
  void OnCheckOrder(uint64_t round, const rendezvous::CheckOrder& o) override {
    calls.push_back("check " + std::to_string(round) + "/" + std::to_string(o.id));
  }
  void OnCheckFinished(uint64_t id, const std::vector<std::string>&, const std::string&) override {
    calls.push_back("checked " + std::to_string(id));
  }
  void OnExcluded(const std::string& reason) override { calls.push_back("excluded " + reason); }
  void OnStacksOrder(uint64_t round, uint64_t id) override {
    calls.push_back("stacks " + std::to_string(round) + "/" + std::to_string(id));
  }
  std::vector<std::string> calls;
};

}  // namespace ftrun::testing
