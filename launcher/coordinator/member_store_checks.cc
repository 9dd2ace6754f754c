#include "launcher/coordinator/member_store_checks.h"

#include "common/log.h"

namespace ftrun::launcher {

using rendezvous::Phase;
using rendezvous::ReportKind;

MemberStoreChecks::MemberStoreChecks(boost::asio::io_context& io, StoreProbeOptions options,
                                     ReportSink report)
    : probe_(io, options,
             [report = std::move(report)](uint64_t round, const StoreTarget& target,
                                          const std::string& error) {
               LauncherLog()->warn(
                   "this node cannot reach group rank {}'s store {} (round={}); telling the "
                   "rendezvous",
                   target.group_rank, error, round);
               auto r = rendezvous::RoundReport::Of(ReportKind::kUnreachable, round);
               r.details.error = error;
               r.details.unreachable_rank = target.group_rank;
               report(std::move(r));
             }) {}

void MemberStoreChecks::Follow(const ViewFollower& follower, bool stopping) {
  const rendezvous::NodeView& v = follower.last_view();
  if (stopping || follower.finished() || v.phase != Phase::kRunning || !v.member ||
      follower.started_round() != v.round || v.assignment.group_world_size <= 1) {
    probe_.Stop();
    return;
  }
  std::vector<StoreTarget> stores;
  for (const auto& p : v.store_peers) stores.push_back({p.group_rank, p.addr, p.port});
  probe_.Watch(v.round, v.assignment.group_rank, v.assignment.group_world_size, std::move(stores));
  // A job-wide stack dump means a suspected hang: every member checks every store at once.
  if (v.stacks_id != 0) probe_.Sweep(v.stacks_id);
}

}  // namespace ftrun::launcher
