// MemberStoreChecks: a coordinator's partition detection (StoreProbe), tied to the round this
// node runs. Both coordinators (the built-in rendezvous' RemoteCoordinator and etcd's
// EtcdCoordinator) call Follow after every view they apply and after the workers stop; while
// the node's workers run a multi-node round it checks the members' stores the view lists, and
// a member whose store fails the checks becomes a KIND_UNREACHABLE report (`report`).
//
// Thread: loop only. Ownership: owns its StoreProbe; `report` must stay callable for its
// lifetime (the probe's callback never runs after Stop or destruction). Errors: none.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>

#include "launcher/coordinator/store_probe.h"
#include "launcher/coordinator/view_follower.h"
#include "rendezvous/job_state.h"

namespace ftrun::launcher {

class MemberStoreChecks {
 public:
  using ReportSink = std::function<void(rendezvous::RoundReport)>;

  MemberStoreChecks(boost::asio::io_context& io, StoreProbeOptions options, ReportSink report);

  // Checks the stores of the round `follower` runs, or stops when it runs none (not a member,
  // not running, done, alone in the round) or `stopping` (the coordinator shuts down: a view
  // answered after that must not re-arm the probe, whose timer would keep the loop alive).
  void Follow(const ViewFollower& follower, bool stopping);
  void Stop() { probe_.Stop(); }

 private:
  StoreProbe probe_;
};

}  // namespace ftrun::launcher
