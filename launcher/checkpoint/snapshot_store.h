// SnapshotStore: the agent-owned memory that holds each local rank's newest training-state
// snapshot (flash checkpoint, issue 15), so that the snapshot outlives the worker that wrote
// it, SIGKILL and OOM kill included.
//
// Per local rank there are two buffers, each a memfd (memfd_create, MFD_CLOEXEC): no name in
// /dev/shm or anywhere else, no dependence on the size of /dev/shm, and the memory is freed
// by the kernel when the agent exits however it exits (the last descriptor and mapping go).
// A save is Begin (the agent hands out the buffer that is NOT the newest complete snapshot;
// the worker receives its descriptor, maps it and copies its state in) then Commit (that
// buffer becomes the newest snapshot). The newest snapshot changes only on Commit: a worker
// that dies between Begin and Commit (then Abort, or the next Begin) leaves the previous
// snapshot whole. Buffers are reused from save to save (same descriptor, grown with ftruncate
// when a save needs more): first touches of fresh shared memory are slow. Each memfd is sealed
// against shrinking, so a worker holding the descriptor cannot make the agent's mapping fault.
//
// A loan (every-step saves of the one copy, lease_mailbox.h): Lend, right after a Begin, gives
// the worker both buffers: it saves into them alternately and records each save itself,
// without a Begin or Commit here. While lent, neither buffer is readable (Newest and Complete
// leave the rank out): the worker may be writing either. Reclaim ends the loan with the
// newest save the worker recorded (it becomes the newest snapshot; the other buffer may hold
// half a save and is not complete), or with none (the snapshot before the loan stays the
// newest: the worker writes its buffer only after recording a save in the other one; and the
// save begun with the loan may still be committed).
//
// A Begin whose buffer is being read (pinned by a view: a persist to storage) does not fail:
// that buffer is set aside for its reader, and the save takes a spare buffer (made once, then
// reused) when the budget holds it, so that the saves made while a snapshot is written to
// storage are kept (they were refused, and a step could be lost).
//
// Memory budget: the sum of every buffer's size, for the whole store. A Begin that would
// exceed it fails naming --flash-memory-budget / FTRUN_FLASH_MEMORY_BUDGET and the sizes, and
// changes nothing. Pages are allocated when first written (by the worker), not by Begin.
//
// Checksum: the CRC-32C (SnapshotChecksum, crc32c.h: SSE4.2, about 0.11 s per GiB) of the
// snapshot's bytes, computed by the agent after the commit on a thread of its own
// (SnapshotChecksummer) and kept in the Meta as a CommitChecksum that every view shares; the
// replica pusher sends it, the persister checks what it writes against it and records it,
// and a restore checks the bytes against it before handing them over. The worker does not
// compute it (its save returns without the extra pass). Persisted files also carry their own
// CRC-32 in their manifest as checkpoint.py requires (see SnapshotPersister).
//
// Thread: loop only (not thread-safe), except that a SnapshotView may be read and dropped on
// any thread (SnapshotPersister's). Ownership: the store owns the descriptors; a Lease's fd is
// borrowed (valid while the store lives; dup it to keep it). A view keeps its buffer alive and
// pinned: while a view of a buffer exists, Begin will not hand that buffer out (it takes a
// spare, or fails saying the snapshot is being read), so a persist in progress never sees it
// overwritten.
// Errors: Result/Status whose message names the rank, step and sizes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "launcher/checkpoint/commit_checksum.h"

namespace ftrun::launcher {

// CRC-32C of `data` (any length), continuing from `crc` (the checksum of the bytes before
// `data`; 0 for none), so a large buffer can be checked in pieces.
uint32_t SnapshotChecksum(std::span<const std::byte> data, uint32_t crc = 0);

// Where a snapshot goes when it is persisted (root empty: nowhere).
struct SnapshotTarget {
  std::string root;       // the checkpoint directory
  std::string path;       // made a link to the stored copy ("" : none)
  std::string name;       // the copy's file name inside its group's directory
  std::string tracker;    // file under root recording the newest step ("" : none)
  std::string part_link;  // made a link to the copy's own directory in the stored step ("": none)
  int world_size = 1;     // ranks of the job that saved it
};

// A snapshot's copy (SnapshotMeta::group): "" the one copy of a DDP job, ShardGroup(r) rank r's
// shard.
inline constexpr std::string_view kShardGroupPrefix = "rank-";
inline bool IsShardGroup(std::string_view group) { return group.starts_with(kShardGroupPrefix); }
inline std::string ShardGroup(int rank) {
  return std::string(kShardGroupPrefix) + std::to_string(rank);
}

// What the worker says about a snapshot it has written.
struct SnapshotMeta {
  // Opaque to the agent: the worker's layout, if it is not inside the snapshot's bytes.
  std::string layout;
  // SnapshotChecksum of the snapshot's `bytes` as committed (pending until computed; none
  // when nobody computes it).
  CommitChecksum checksum;
  std::string group;  // which copy (kShardGroupPrefix)
  SnapshotTarget target;
};

// One memfd buffer: its descriptor and a read-only shared mapping of its whole size.
// Closed and unmapped when the last owner (store or view) drops it.
class SnapshotBuffer;

// A handed-out buffer for the save of `step`: the worker writes `bytes` bytes into `fd`.
struct SnapshotLease {
  int fd = -1;  // borrowed from the store; the buffer's size is at least `bytes`
  uint64_t step = 0;
  size_t bytes = 0;
};

// A complete snapshot, readable on any thread for as long as the view lives.
struct SnapshotView {
  int local_rank = 0;
  uint64_t step = 0;
  size_t bytes = 0;  // the snapshot's size (its buffer may be larger)
  SnapshotMeta meta;
  std::shared_ptr<const SnapshotBuffer> buffer;  // pins the buffer (see the header)
  // The buffer's generation when the view was taken: every Begin that hands the buffer out
  // again raises it. A reader that does not pin the buffer (a replica copy reads through its
  // own mapping of fd()) checks, after reading, that generation_counter() still equals it:
  // then no worker can have written into the bytes it read.
  uint64_t generation = 0;

  std::span<const std::byte> data() const;  // the snapshot's bytes
  int fd() const;                           // the buffer's descriptor (e.g. for a peer copy)
  std::shared_ptr<const std::atomic<uint64_t>> generation_counter() const;
};

// Recomputes the checksum of `view`'s bytes (on the calling thread); an error names the rank,
// step and both values. A snapshot without a known checksum passes.
Status Verify(const SnapshotView& view);
// Whether `actual` (the checksum of view's bytes as read) is the one recorded (if any); the
// same error as Verify.
Status ChecksumMatches(const SnapshotView& view, uint32_t actual);

class SnapshotStore {
 public:
  // `local_ranks` ranks (0..local_ranks-1), `budget_bytes` of memory for all buffers.
  SnapshotStore(int local_ranks, uint64_t budget_bytes);
  ~SnapshotStore();
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // Starts the save of `step` (`bytes` > 0) by `local_rank`: a save already begun by that rank
  // is abandoned first. Errors (nothing changed, the newest snapshot kept): a rank out of
  // range, zero bytes, the budget, the buffer being read by a view, or the kernel refusing the
  // memory (memfd_create/ftruncate/mmap, with errno's text).
  Result<SnapshotLease> Begin(int local_rank, uint64_t step, size_t bytes);
  // Makes the begun save the rank's newest snapshot, of `step`. `begun`: the step the save was
  // begun with, when the worker took its lease ahead of knowing the step (default: `step`);
  // `bytes`: the snapshot's size when smaller than the lease. Errors: no save begun with that
  // step by that rank, or more bytes than the lease. The bytes are not checked here (Verify
  // does, off the loop).
  Status Commit(int local_rank, uint64_t step, SnapshotMeta meta,
                std::optional<uint64_t> begun = std::nullopt,
                std::optional<size_t> bytes = std::nullopt);
  // Lends both of the rank's buffers to its worker (see above). Errors (nothing lent): no save
  // begun, no newest snapshot (the second buffer), or a buffer being read.
  Status Lend(int local_rank);
  bool Lent(int local_rank) const;
  // The worker's newest save under the loan: the buffer it wrote (by inode), its step and
  // size, and where it is persisted (the rest of the target as with the save before the loan).
  struct Recorded {
    uint64_t inode = 0;
    uint64_t step = 0;
    size_t bytes = 0;
    std::string path;
  };
  // Ends the rank's loan (nothing when none), with the worker's newest recorded save, or
  // none. Errors: a record that names neither buffer, or more bytes than its buffer: then
  // neither buffer is a complete snapshot any more (the worker may have written both).
  Status Reclaim(int local_rank, const std::optional<Recorded>& newest);
  // Whether the rank's next Begin of `bytes` would fail because its buffer is being read
  // (pinned) and no spare buffer fits the budget.
  bool Busy(int local_rank, size_t bytes) const;
  // Abandons the rank's begun save, if any (e.g. its worker died).
  void Abort(int local_rank);

  std::optional<SnapshotView> Newest(int local_rank) const;
  // The step of the rank's newest snapshot, also while lent (not readable then).
  std::optional<uint64_t> NewestStep(int local_rank) const;
  // The rank's complete snapshots, newest first: the newest and, until the next Begin hands
  // its buffer out, the one before it (so a job whose ranks' newest steps differ after a
  // crash mid-save can still restore one step on all of them).
  std::vector<SnapshotView> Complete(int local_rank) const;
  int local_ranks() const { return static_cast<int>(ranks_.size()); }
  // Bytes of memory held by all buffers (what the budget counts).
  uint64_t reserved_bytes() const { return reserved_; }
  uint64_t budget_bytes() const { return budget_; }

 private:
  struct Slot {
    std::shared_ptr<SnapshotBuffer> buffer;  // null until first used
    uint64_t step = 0;
    size_t bytes = 0;
    bool complete = false;  // holds a committed snapshot
    SnapshotMeta meta;
  };
  struct Rank {
    Slot slots[2];
    int newest = -1;                // index of the newest complete snapshot, -1 for none
    std::optional<uint64_t> begun;  // the step of the save in progress (in slots[1-newest])
    bool lent = false;              // both slots are the worker's (Lend)
    // Buffers set aside by a Begin while being read, then kept as spares for the next such
    // Begin (counted in the budget; a worker keeps its mapping of each buffer it was given,
    // so they are reused rather than freed and made anew).
    std::vector<std::shared_ptr<SnapshotBuffer>> spares;
  };
  // The rank's first spare that no view reads any more (end() for none).
  static std::vector<std::shared_ptr<SnapshotBuffer>>::const_iterator FreeSpare(const Rank& rank);
  // Whether a Begin of `bytes` whose buffer is pinned can take a spare within the budget.
  bool CanSetAside(const Rank& rank, size_t bytes) const;
  Rank* RankAt(int local_rank);
  const Rank* RankAt(int local_rank) const;
  static int WriteSlot(const Rank& rank) { return rank.newest == 0 ? 1 : 0; }
  static SnapshotView ViewOf(int local_rank, const Slot& slot);

  std::vector<Rank> ranks_;
  uint64_t budget_;
  uint64_t reserved_ = 0;
};

}  // namespace ftrun::launcher
