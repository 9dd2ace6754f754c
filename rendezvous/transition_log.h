// TransitionLog: what the job's state machine did, told to operators: one log line per
// state transition and node event, and the same as event-log records (round_formed,
// node_joined/left/lost/excluded, network checks, round_saving/stopping, job_finished). One
// implementation for every host of the state machine (the gRPC server, the etcd leader).
//
// Thread: the state machine's owner's. Ownership: shares the event log (may be null).
#pragma once

#include <memory>
#include <string>

#include "common/event_log.h"
#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {

class TransitionLog {
 public:
  explicit TransitionLog(std::shared_ptr<EventLog> event_log = nullptr)
      : event_log_(std::move(event_log)) {}
  // Drains the state's events and logs them, and the phase or round if it changed.
  void Log(RendezvousState& state);

 private:
  std::shared_ptr<EventLog> event_log_;
  Phase logged_phase_ = Phase::kForming;
  uint64_t logged_round_ = 0;
  std::string logged_save_;
  TimePoint save_started_;
};

}  // namespace ftrun::rendezvous
