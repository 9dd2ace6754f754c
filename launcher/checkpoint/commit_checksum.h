// CommitChecksum: the CRC-32C of a snapshot's bytes as they were when it committed, computed
// once off the loop (SnapshotChecksummer) and shared by every view of that snapshot, so the
// replica pusher, the persister and a restore use that one value instead of each reading the
// bytes again, and so bytes changed after the commit are found out rather than certified.
//
// Three states: none (a default-constructed one: nothing will be computed), pending, and
// settled (the value, or never: the buffer was handed out again before it was read).
//
// Thread: any; copies share the state. Errors: none (an unknown value is nullopt).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

namespace ftrun::launcher {

class CommitChecksum {
 public:
  CommitChecksum() = default;  // none
  static CommitChecksum Pending();
  static CommitChecksum Known(uint32_t crc);

  // Settles it (the first call wins): the value, or nullopt for never.
  void Settle(std::optional<uint32_t> crc) const;
  // The value if settled with one.
  std::optional<uint32_t> value() const;
  // Whether a value may still come.
  bool pending() const;
  // Waits until it settles or `deadline`; the value if there is one by then.
  std::optional<uint32_t> Wait(std::chrono::steady_clock::time_point deadline) const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable settled_cv;
    bool settled = false;
    std::optional<uint32_t> crc;
  };
  std::shared_ptr<State> state_;
};

}  // namespace ftrun::launcher
