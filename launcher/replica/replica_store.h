// ReplicaStore: the copies of other nodes' shard snapshots that this agent keeps (flash
// checkpoint replicas, ftrun-flash-checkpoint(7)), so a shard survives the loss of the node
// whose rank saved it.
//
// Per group ("rank-<r>") there are two buffers, each a memfd like the SnapshotStore's (no name
// in /dev/shm, freed by the kernel when the agent exits, sealed against shrinking so a worker
// given the descriptor cannot make the agent's mapping fault). A copy arrives as Begin (the
// buffer that is NOT the group's newest complete replica is handed out for writing) then
// Finish (the checksum of what arrived is compared with the sender's; only if they agree does
// the buffer become the group's newest replica). A copy that fails or whose sender disappears
// (Abort) leaves the previous complete replica of the group intact: double buffering.
//
// Limits: at most one copy of a group in flight (a second Begin is refused); the sum of all
// buffers' sizes stays within `budget_bytes` (a copy that does not fit is refused whole, with
// an error naming --flash-memory-budget; nothing partial is ever kept).
//
// Thread: loop only, except that a ReplicaWrite's buffer is written by the one thread that
// receives that copy until it calls Finish or Abort (on the loop), and a ReplicaView may be
// read and dropped on any thread. Errors: Result/Status naming the group, step and sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

namespace ftrun::launcher {

// One memfd of a replica, mapped read-write for the agent. Closed when the last owner drops it.
class ReplicaBuffer;

// A buffer handed out to receive one copy: write `bytes` bytes into data(), then Finish(id).
struct ReplicaWrite {
  uint64_t id = 0;
  std::string group;
  uint64_t step = 0;
  size_t bytes = 0;
  std::shared_ptr<ReplicaBuffer> buffer;
  // Its pages were never written (a new or grown buffer): the receiver allocates them in one
  // call before the bytes arrive rather than one fault per page while they do.
  bool fresh = false;
  std::span<std::byte> data() const;
  // If fresh, allocates the pages in one call (the kernel maps them in bulk): touched one fault
  // at a time by the copy, they cost a fresh buffer's copy about twice the time of a reused
  // one. Best effort: without it the copy faults them in.
  void PopulateIfFresh() const;
};

// A complete replica: its bytes are a snapshot exactly as the sending node's worker wrote it.
struct ReplicaView {
  std::string group;
  uint64_t step = 0;
  size_t bytes = 0;
  std::string from;       // the sender's host
  std::string name;       // the file name the shard's rank gave it ("" from an older sender)
  std::string part_link;  // the shard's own link its rank gave it ("": none)
  uint32_t crc32c = 0;    // the CRC-32C its bytes arrived with (the sender's, checked)
  std::shared_ptr<const ReplicaBuffer> buffer;
  std::span<const std::byte> data() const;
  int fd() const;
};

class ReplicaStore {
 public:
  explicit ReplicaStore(uint64_t budget_bytes);
  ~ReplicaStore();
  ReplicaStore(const ReplicaStore&) = delete;
  ReplicaStore& operator=(const ReplicaStore&) = delete;

  // Starts receiving the copy of `step` of `group` (`bytes` > 0). Errors (nothing changed): a
  // copy of the group in flight, the budget, the write buffer being read, the kernel.
  // `name`, `part_link`: what the shard's rank gave it (ReplicaView::name, part_link).
  Result<ReplicaWrite> Begin(const std::string& group, uint64_t step, size_t bytes,
                             const std::string& from, const std::string& name = {},
                             const std::string& part_link = {});
  // The copy `id` has arrived whole: `sent` is the sender's checksum, `received` the one of
  // the bytes written. Equal: it becomes the group's newest replica. Otherwise it is dropped
  // (the previous replica kept) and the error names both checksums.
  Status Finish(uint64_t id, uint32_t sent, uint32_t received);
  // The copy `id` will not complete (its sender is gone, or it was refused midway).
  void Abort(uint64_t id);

  // The group's complete replicas, newest first (at most two).
  std::vector<ReplicaView> Complete(const std::string& group) const;
  // The groups that have a complete replica.
  std::vector<std::string> Groups() const;
  uint64_t reserved_bytes() const { return reserved_; }
  uint64_t budget_bytes() const { return budget_; }

 private:
  struct Slot {
    std::shared_ptr<ReplicaBuffer> buffer;
    uint64_t step = 0;
    size_t bytes = 0;
    std::string from;
    std::string name;
    std::string part_link;
    uint32_t crc32c = 0;
    bool complete = false;
  };
  struct Group {
    Slot slots[2];
    int newest = -1;
    std::optional<uint64_t> writing;  // id of the copy in flight (into slots[1 - newest])
  };
  static int WriteSlot(const Group& g) { return g.newest == 0 ? 1 : 0; }
  Group* Writing(uint64_t id, std::string* name);

  std::map<std::string, Group> groups_;
  uint64_t budget_;
  uint64_t reserved_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace ftrun::launcher
