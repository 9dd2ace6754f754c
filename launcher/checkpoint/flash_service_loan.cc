// FlashService's loans of both of a rank's buffers for every-step saves (flash_service.h,
// lease_mailbox.h): granting one with a lease, and taking the newest recorded save back.
#include "common/log.h"
#include "launcher/checkpoint/flash_service.h"

namespace ftrun::launcher {

bool FlashService::MaybeLend(int local_rank, const v1::ControlSnapshotBegin& r,
                             LeaseMailbox& mailbox, int lease_fd) {
  if (!r.loan() || !lending_ || !r.group().empty() || persisting_[local_rank]) return false;
  int newest_fd = -1;  // borrowed from the store; the view would pin the buffer
  if (auto newest = store_.Newest(local_rank);
      newest && newest->meta.group == r.group() && !newest->meta.target.root.empty() &&
      newest->meta.target.part_link.empty()) {  // a lent save's record carries no part_link
    newest_fd = newest->fd();
  }
  if (newest_fd < 0) return false;
  if (Status lent = store_.Lend(local_rank); !lent) {
    LauncherLog()->debug("flash checkpoint: local_rank={} not lent: {}", local_rank,
                         lent.error().message);
    return false;
  }
  mailbox.EndLoan();
  if (mailbox.Grant(r.id(), static_cast<uint64_t>(r.step()), lease_fd, newest_fd)) return true;
  (void)store_.Reclaim(local_rank, std::nullopt);
  return false;
}

void FlashService::Reclaim(int local_rank) {
  if (!store_.Lent(local_rank)) return;
  auto box = mailboxes_.find(local_rank);
  std::optional<SnapshotStore::Recorded> recorded;
  if (box != mailboxes_.end()) {
    auto newest = box->second->Newest();
    box->second->EndLoan();
    if (newest) {
      recorded = std::move(*newest);
    } else {
      LauncherLog()->warn("flash checkpoint: local_rank={} lent buffers: {}", local_rank,
                          newest.error().message);
      recorded = SnapshotStore::Recorded{};  // names no buffer: the worker may have written both
    }
  }
  if (Status taken = store_.Reclaim(local_rank, recorded); !taken) {
    LauncherLog()->warn("flash checkpoint: {}", taken.error().message);
    return;
  }
  if (recorded) {
    LauncherLog()->debug("flash checkpoint: local_rank={} step={} in memory (lent buffers)",
                         local_rank, recorded->step);
    checksummer_.Commit(*store_.Newest(local_rank), [](std::optional<uint32_t>, auto&) {});
    if (on_reclaimed_) on_reclaimed_(local_rank, recorded->step);
  }
}

std::optional<uint64_t> FlashService::NewestStep(int local_rank) const {
  if (store_.Lent(local_rank)) {
    if (auto box = mailboxes_.find(local_rank); box != mailboxes_.end()) {
      if (auto r = box->second->Newest(); r && *r) return (*r)->step;
    }
  }
  return store_.NewestStep(local_rank);
}

}  // namespace ftrun::launcher
