// ApplyReport: what a node's report does to the state machine, once the server has checked
// its header and knows the node. Shared by the gRPC server, the etcd leader, the single-node
// coordinator and the state fuzzer, so all of them drive exactly the same path (a stopped
// report's flash-checkpoint inventory included).
//
// Errors: a request over the size limits, a failure report without failures or an unknown
// report kind is refused with a message (the server answers INVALID_ARGUMENT) and changes
// nothing.
#pragma once

#include <string>

#include "common/result.h"
#include "ftrun/v1/rendezvous.pb.h"
#include "rendezvous/rendezvous_state.h"

namespace ftrun::rendezvous {

// A report from this process (the single-node coordinator): trusted sizes.
Status ApplyReport(RendezvousState& state, const std::string& node_id, const RoundReport& report,
                   TimePoint now);
// A report from the network: the size limits first (wire.h), then as above.
Status ApplyReport(RendezvousState& state, const std::string& node_id,
                   const v1::ReportRequest& report, TimePoint now);

}  // namespace ftrun::rendezvous
