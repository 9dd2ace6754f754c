// Conversions between the generated protobuf messages (the wire) and the plain domain types
// of job_state.h. The only place outside the adapters that sees generated types. Size limits
// of proto/README.md are applied here when encoding and checked when decoding.
#pragma once

#include "common/result.h"
#include "ftrun/v1/rendezvous.pb.h"
#include "rendezvous/job_state.h"

namespace ftrun::rendezvous {

// 2: RequestHeader.node_secret and JoinResponse.node_secret (per-node credentials).
// 3: Reports answered ABORTED while a restarted server rebuilds the round (send again);
//    NodeView.store_peers, NodeInfo.store_listens, ReportRequest.unreachable_rank (partitions
//    between any two members). A version-2 agent treats ABORTED as fatal: it is answered
//    UNAVAILABLE instead, which it retries as an outage.
inline constexpr uint32_t kProtocolVersion = 3;
inline constexpr uint32_t kOldestProtocolVersion = 2;
inline constexpr size_t kMaxNodeId = 256;
inline constexpr size_t kMaxToken = 4096;
inline constexpr size_t kMaxFailures = 64;
inline constexpr size_t kMaxText = 64 * 1024;
inline constexpr size_t kMaxProgress = 65536;
inline constexpr size_t kMaxStorePeers = 65536;  // NodeView.store_peers

void ToWire(const NodeInfo& in, v1::NodeInfo* out);
NodeInfo FromWire(const v1::NodeInfo& in, const std::string& node_id);

void ToWire(const NodeAssignment& in, v1::Assignment* out);
NodeAssignment FromWire(const v1::Assignment& in);

void ToWire(const NodeView& in, v1::NodeView* out);
NodeView FromWire(const v1::NodeView& in);

void ToWire(const RankProgress& in, v1::RankProgress* out);
RankProgress FromWire(const v1::RankProgress& in);

void ToWire(const WorkerFailure& in, v1::WorkerFailure* out);
WorkerFailure FromWire(const v1::WorkerFailure& in);

// The request's body (its header is the client's): failures and texts clipped to the limits.
void ToWire(const RoundReport& in, v1::ReportRequest* out);
// Its body back; an unknown kind is an error naming it (limits: CheckLimits).
Result<RoundReport> FromWire(const v1::ReportRequest& in);

v1::Phase ToWire(Phase p);
Phase FromWire(v1::Phase p);

void ToWire(const JobStatus& in, v1::JobStatus* out);
JobStatus FromWire(const v1::JobStatus& in);

// wire_check.cc: the network check's part of a view, and of a report.
void CheckToWire(const NodeView& in, v1::NodeView* out);
void CheckFromWire(const v1::NodeView& in, NodeView& out);
void ToWire(const CheckTaskResult& in, v1::CheckTaskResult* out);
CheckTaskResult FromWire(const v1::CheckTaskResult& in);
Status CheckResultLimits(const v1::ReportRequest& req);

// wire_stacks.cc: stack dumps (texts clipped to kMaxStackText, notes to 1 KiB).
inline constexpr size_t kMaxStackText = 64 * 1024;
inline constexpr size_t kMaxStacksPerReport = 4096;
void ToWire(const RankStack& in, v1::RankStack* out);
RankStack FromWire(const v1::RankStack& in);
void ToWire(const StacksCollection& in, v1::StacksCollection* out);
StacksCollection FromWire(const v1::StacksCollection& in);
Status CheckStacksLimits(const v1::ReportRequest& req);

// wire_flash.cc: flash checkpoint (NodeInfo.flash, ReportRequest.flash; Assignment.restore_*,
// replica_order). One inventory check for a join and a stopped report (flash_plan.h's bounds).
void FlashToWire(const NodeInfo& in, v1::NodeInfo* out);
void FlashFromWire(const v1::NodeInfo& in, NodeInfo& out);
Status CheckFlashLimits(const v1::NodeInfo& node);
void FlashToWire(const RoundReport& in, v1::ReportRequest* out);
void FlashFromWire(const v1::ReportRequest& in, RoundReport& out);
Status CheckFlashLimits(const v1::ReportRequest& report);
void RestoreToWire(const NodeAssignment& in, v1::Assignment* out);
void RestoreFromWire(const v1::Assignment& in, NodeAssignment& out);

// Checks the size limits of a request's repeated and text fields.
Status CheckLimits(const v1::ReportRequest& req);
Status CheckLimits(const v1::NodeInfo& node);
// A request header's node id (1..kMaxNodeId printable ASCII bytes), node secret and token
// sizes. Messages never quote the peer's text.
Status CheckHeader(const v1::RequestHeader& header);
// Whether the server speaks a client's protocol `version` (kOldestProtocolVersion ..
// kProtocolVersion); if not, the one message naming both versions and what to do.
Status CheckProtocolVersion(uint32_t version);
// Whether every byte of `text` is printable ASCII (0x20..0x7e).
bool IsPrintable(std::string_view text);

}  // namespace ftrun::rendezvous
