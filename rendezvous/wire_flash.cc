// Wire conversions of the flash-checkpoint parts of a join, a stopped report and an
// assignment (rendezvous.proto: NodeInfo.flash and run_started_ms, ReportRequest.flash,
// Assignment.restore_*, replica_order and run_started_ms).
#include <algorithm>

#include "rendezvous/flash_plan.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

namespace {

using WireCopies = google::protobuf::RepeatedPtrField<v1::FlashCopy>;

void CopiesToWire(const std::vector<FlashCopy>& in, WireCopies* out) {
  for (const FlashCopy& c : in) {
    auto* w = out->Add();
    w->set_group(c.group);
    w->set_world_size(c.world_size);
    for (int64_t s : c.steps) w->add_steps(s);
  }
}

std::vector<FlashCopy> CopiesFromWire(const WireCopies& in) {
  std::vector<FlashCopy> out;
  for (const auto& w : in) {
    out.push_back(FlashCopy{w.group(), w.world_size(),
                            std::vector<int64_t>(w.steps().begin(), w.steps().end())});
  }
  return out;
}

// The one check of an inventory, in a join or in a stopped report.
Status CheckCopies(const WireCopies& copies) {
  if (static_cast<size_t>(copies.size()) > kMaxFlashCopies) {
    return Error{"flash checkpoint inventory of " + std::to_string(copies.size()) +
                 " copies (at most " + std::to_string(kMaxFlashCopies) + ")"};
  }
  for (const auto& c : copies) {
    if (c.group().size() > kMaxFlashGroupBytes || !IsPrintable(c.group())) {
      return Error{"a flash checkpoint copy's group name is over " +
                   std::to_string(kMaxFlashGroupBytes) + " bytes or not printable"};
    }
    if (static_cast<size_t>(c.steps_size()) > kMaxFlashSteps || c.world_size() < 0) {
      return Error{"flash checkpoint copy '" + c.group() + "' lists " +
                   std::to_string(c.steps_size()) + " steps (at most " +
                   std::to_string(kMaxFlashSteps) + ") or a negative world size"};
    }
    for (int64_t s : c.steps()) {
      if (s < 0) return Error{"flash checkpoint copy '" + c.group() + "' lists a negative step"};
    }
  }
  return {};
}

}  // namespace

void FlashToWire(const NodeInfo& in, v1::NodeInfo* out) {
  out->set_flash_reported(in.flash_reported);
  CopiesToWire(in.flash, out->mutable_flash());
  out->set_run_started_ms(in.run_started_ms);
}

void FlashFromWire(const v1::NodeInfo& in, NodeInfo& out) {
  out.flash_reported = in.flash_reported();
  out.flash = CopiesFromWire(in.flash());
  out.run_started_ms = std::max<int64_t>(0, in.run_started_ms());  // before the epoch: unknown
}

Status CheckFlashLimits(const v1::NodeInfo& node) { return CheckCopies(node.flash()); }

void FlashToWire(const RoundReport& in, v1::ReportRequest* out) {
  if (!in.flash) return;
  out->set_flash_reported(true);
  CopiesToWire(*in.flash, out->mutable_flash());
}

void FlashFromWire(const v1::ReportRequest& in, RoundReport& out) {
  if (in.flash_reported()) out.flash = CopiesFromWire(in.flash());
}

Status CheckFlashLimits(const v1::ReportRequest& report) { return CheckCopies(report.flash()); }

void RestoreToWire(const NodeAssignment& in, v1::Assignment* out) {
  if (in.restore_copy) out->set_restore_copy(*in.restore_copy);
  if (in.restore_shards) out->set_restore_shards(*in.restore_shards);
  for (int r : in.replica_order) out->add_replica_order(r);
  out->set_run_started_ms(in.run_started_ms);
}

void RestoreFromWire(const v1::Assignment& in, NodeAssignment& out) {
  if (in.has_restore_copy()) out.restore_copy = std::max<int64_t>(-1, in.restore_copy());
  if (in.has_restore_shards()) out.restore_shards = std::max<int64_t>(-1, in.restore_shards());
  out.run_started_ms = std::max<int64_t>(0, in.run_started_ms());
  // Only ranks of the round: an entry out of range would index past the replica peers.
  if (in.replica_order_size() > 4096) return;
  for (int r : in.replica_order()) {
    if (r >= 0 && r < in.group_world_size()) out.replica_order.push_back(r);
  }
}

}  // namespace ftrun::rendezvous
