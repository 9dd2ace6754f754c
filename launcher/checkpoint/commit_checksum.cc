#include "launcher/checkpoint/commit_checksum.h"

namespace ftrun::launcher {

CommitChecksum CommitChecksum::Pending() {
  CommitChecksum c;
  c.state_ = std::make_shared<State>();
  return c;
}

CommitChecksum CommitChecksum::Known(uint32_t crc) {
  CommitChecksum c = Pending();
  c.Settle(crc);
  return c;
}

void CommitChecksum::Settle(std::optional<uint32_t> crc) const {
  if (!state_) return;
  {
    std::lock_guard lock(state_->mu);
    if (state_->settled) return;
    state_->settled = true;
    state_->crc = crc;
  }
  state_->settled_cv.notify_all();
}

std::optional<uint32_t> CommitChecksum::value() const {
  if (!state_) return std::nullopt;
  std::lock_guard lock(state_->mu);
  return state_->crc;
}

bool CommitChecksum::pending() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return !state_->settled;
}

std::optional<uint32_t> CommitChecksum::Wait(std::chrono::steady_clock::time_point deadline) const {
  if (!state_) return std::nullopt;
  std::unique_lock lock(state_->mu);
  state_->settled_cv.wait_until(lock, deadline, [&] { return state_->settled; });
  return state_->crc;
}

}  // namespace ftrun::launcher
