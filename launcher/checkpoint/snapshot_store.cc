#include "launcher/checkpoint/snapshot_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "launcher/checkpoint/memfd_buffer.h"
#include "launcher/replica/crc32c.h"

namespace ftrun::launcher {

// A snapshot's memory, mapped read-only here (the worker writes it through its descriptor).
class SnapshotBuffer : public MemfdBuffer {
 public:
  using MemfdBuffer::MemfdBuffer;
  // Raised (on the loop) each time the buffer is handed out for writing.
  const std::shared_ptr<std::atomic<uint64_t>>& generation() const { return generation_; }

 private:
  std::shared_ptr<std::atomic<uint64_t>> generation_ = std::make_shared<std::atomic<uint64_t>>(0);
};

uint32_t SnapshotChecksum(std::span<const std::byte> data, uint32_t crc) {
  return Crc32c(data, crc);
}

std::span<const std::byte> SnapshotView::data() const { return {buffer->data(), bytes}; }

int SnapshotView::fd() const { return buffer->fd(); }

std::shared_ptr<const std::atomic<uint64_t>> SnapshotView::generation_counter() const {
  return buffer->generation();
}

Status Verify(const SnapshotView& view) {
  if (!view.meta.checksum.value()) return {};
  return ChecksumMatches(view, SnapshotChecksum(view.data()));
}

Status ChecksumMatches(const SnapshotView& view, uint32_t actual) {
  const auto recorded = view.meta.checksum.value();
  if (recorded && actual != *recorded) {
    return Error{"the snapshot of local rank " + std::to_string(view.local_rank) + " at step " +
                 std::to_string(view.step) + " has checksum " + std::to_string(actual) +
                 ", not the " + std::to_string(*recorded) + " recorded when it was saved"};
  }
  return {};
}

SnapshotStore::SnapshotStore(int local_ranks, uint64_t budget_bytes)
    : ranks_(static_cast<size_t>(std::max(local_ranks, 0))), budget_(budget_bytes) {}

SnapshotStore::~SnapshotStore() = default;

SnapshotStore::Rank* SnapshotStore::RankAt(int local_rank) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= ranks_.size()) return nullptr;
  return &ranks_[static_cast<size_t>(local_rank)];
}

const SnapshotStore::Rank* SnapshotStore::RankAt(int local_rank) const {
  return const_cast<SnapshotStore*>(this)->RankAt(local_rank);
}

Result<SnapshotLease> SnapshotStore::Begin(int local_rank, uint64_t step, size_t bytes) {
  std::string what = "memory snapshot of local rank " + std::to_string(local_rank) + " at step " +
                     std::to_string(step);
  Rank* rank = RankAt(local_rank);
  if (rank == nullptr) {
    return Error{what + ": no such local rank (this node has " + std::to_string(ranks_.size()) +
                 ")"};
  }
  if (bytes == 0) return Error{what + ": a snapshot needs at least one byte"};
  if (rank->lent) return Error{what + ": its buffers are lent to the worker"};
  Abort(local_rank);
  Slot& slot = rank->slots[WriteSlot(*rank)];
  // The buffer this save would overwrite is being read (a persist): it stays its reader's and
  // the save takes a spare (one set aside before and read no more, else a new one), so that a
  // save during a persist is not lost. Nothing changes until the buffer is ready.
  const bool pinned = slot.buffer && slot.buffer.use_count() > 1;
  if (pinned && !CanSetAside(*rank, bytes)) {
    return Error{what + ": its buffer still holds step " + std::to_string(slot.step) +
                 ", which is being read (persisted or copied), and a spare buffer of " +
                 std::to_string(bytes) + " bytes does not fit in the flash checkpoint " +
                 "memory budget of " + std::to_string(budget_) + " bytes; try the next save"};
  }
  const auto spare = pinned ? FreeSpare(*rank) : rank->spares.end();
  std::shared_ptr<SnapshotBuffer> buffer = !pinned                       ? slot.buffer
                                           : spare != rank->spares.end() ? *spare
                                                                         : nullptr;
  const size_t have = buffer ? buffer->size() : 0;
  if (bytes > have) {
    uint64_t after = reserved_ - have + bytes;
    if (after > budget_ || bytes > budget_) {
      return Error{what + ": " + std::to_string(bytes) + " bytes do not fit in the flash " +
                   "checkpoint memory budget of " + std::to_string(budget_) + " bytes (" +
                   std::to_string(reserved_ - have) +
                   " bytes already hold other snapshots); raise --flash-memory-budget "
                   "(FTRUN_FLASH_MEMORY_BUDGET)"};
    }
    if (!buffer) {
      auto created = NewMemfdBuffer<SnapshotBuffer>("ftrun-snapshot-" + std::to_string(local_rank),
                                                    bytes, MemfdBuffer::Access::kRead);
      if (!created) return created.error().Wrap(what);
      buffer = std::move(*created);
    } else if (auto grown = buffer->Grow(bytes); !grown) {
      return grown.error().Wrap(what);
    }
    reserved_ = after;
  }
  if (pinned) {
    // At info when the memory grows, not at every persist that reuses the spare.
    LauncherLog()->log(
        bytes > have ? spdlog::level::info : spdlog::level::debug,
        "memory snapshot of local rank {}: step {} is being read (persisted or copied); the "
        "save of step {} goes to a spare buffer ({} bytes of snapshot memory now)",
        local_rank, slot.step, step, reserved_);
    if (spare != rank->spares.end()) rank->spares.erase(spare);
    rank->spares.push_back(std::move(slot.buffer));
  }
  slot.buffer = std::move(buffer);
  rank->begun = step;
  // Before the worker gets the descriptor: an unpinned reader sees the change after its read.
  slot.buffer->generation()->fetch_add(1, std::memory_order_seq_cst);
  slot.complete = false;  // the older snapshot it held is being overwritten
  slot.step = step;
  slot.bytes = bytes;
  slot.meta = {};
  return SnapshotLease{.fd = slot.buffer->fd(), .step = step, .bytes = bytes};
}

Status SnapshotStore::Commit(int local_rank, uint64_t step, SnapshotMeta meta,
                             std::optional<uint64_t> begun, std::optional<size_t> bytes) {
  const std::string what = "commit of the memory snapshot of local rank " +
                           std::to_string(local_rank) + " at step " + std::to_string(step);
  Rank* rank = RankAt(local_rank);
  if (rank == nullptr || rank->begun != begun.value_or(step)) {
    return Error{what + ": no save of that step was begun"};
  }
  int index = WriteSlot(*rank);
  if (bytes) {
    if (*bytes == 0 || *bytes > rank->slots[index].bytes) {
      return Error{what + ": " + std::to_string(*bytes) + " bytes in a lease of " +
                   std::to_string(rank->slots[index].bytes)};
    }
    rank->slots[index].bytes = *bytes;
  }
  rank->slots[index].step = step;
  rank->slots[index].meta = std::move(meta);
  rank->slots[index].complete = true;
  rank->newest = index;
  rank->begun.reset();
  LauncherLog()->debug("memory snapshot of local rank {} at step {} complete ({} bytes)",
                       local_rank, step, rank->slots[index].bytes);
  return {};
}

Status SnapshotStore::Lend(int local_rank) {
  Rank* rank = RankAt(local_rank);
  if (rank == nullptr || !rank->begun || rank->newest < 0) {
    return Error{"local rank " + std::to_string(local_rank) +
                 " has no begun save after a complete one: nothing to lend"};
  }
  for (const Slot& slot : rank->slots) {
    if (!slot.buffer || slot.buffer.use_count() > 1) {
      return Error{"a buffer of local rank " + std::to_string(local_rank) + " is being read"};
    }
  }
  // The newest snapshot's generation is not raised: the worker writes that buffer only after
  // recording a save in the other one, and then Reclaim replaces or drops the snapshot (and
  // raises both) before anything reads it or its checksum; with no record it is untouched,
  // and a checksum of it still being computed is good.
  rank->lent = true;
  LauncherLog()->debug("memory snapshot buffers of local rank {} lent after step {}", local_rank,
                       rank->slots[rank->newest].step);
  return {};
}

bool SnapshotStore::Lent(int local_rank) const {
  const Rank* rank = RankAt(local_rank);
  return rank != nullptr && rank->lent;
}

Status SnapshotStore::Reclaim(int local_rank, const std::optional<Recorded>& newest) {
  Rank* rank = RankAt(local_rank);
  if (rank == nullptr || !rank->lent) return {};
  rank->lent = false;
  // No save under the loan: the snapshot before it is whole (see the header), and the lease
  // that came with the loan is an ordinary one still.
  if (!newest) return {};
  rank->begun.reset();
  const SnapshotMeta before = rank->slots[rank->newest].meta;
  int index = -1;
  for (int i = 0; i < 2; ++i) {
    struct stat st {};
    if (::fstat(rank->slots[i].buffer->fd(), &st) == 0 &&
        static_cast<uint64_t>(st.st_ino) == newest->inode) {
      index = i;
    }
  }
  for (Slot& slot : rank->slots) {
    slot.complete = false;
    slot.buffer->generation()->fetch_add(1, std::memory_order_seq_cst);
  }
  if (index < 0 || newest->bytes == 0 || newest->bytes > rank->slots[index].buffer->size()) {
    rank->newest = -1;
    return Error{"the save local rank " + std::to_string(local_rank) +
                 " recorded under its loan names no buffer of its own or more bytes than it "
                 "holds: the rank has no memory snapshot now (its worker may have written "
                 "both buffers)"};
  }
  Slot& slot = rank->slots[index];
  slot.step = newest->step;
  slot.bytes = newest->bytes;
  slot.meta = before;
  slot.meta.checksum = CommitChecksum::Pending();
  slot.meta.target.path = newest->path;
  slot.complete = true;
  rank->newest = index;
  LauncherLog()->debug("memory snapshot of local rank {} at step {} complete ({} bytes, lent)",
                       local_rank, slot.step, slot.bytes);
  return {};
}

std::vector<std::shared_ptr<SnapshotBuffer>>::const_iterator SnapshotStore::FreeSpare(
    const Rank& rank) {
  return std::find_if(rank.spares.begin(), rank.spares.end(),
                      [](const auto& b) { return b.use_count() == 1; });
}

bool SnapshotStore::CanSetAside(const Rank& rank, size_t bytes) const {
  // What Begin's budget check will find with the spare it takes.
  const auto spare = FreeSpare(rank);
  const size_t have = spare != rank.spares.end() ? (*spare)->size() : 0;
  return bytes <= have || (bytes <= budget_ && reserved_ - have + bytes <= budget_);
}

bool SnapshotStore::Busy(int local_rank, size_t bytes) const {
  const Rank* rank = RankAt(local_rank);
  if (rank == nullptr) return false;
  const Slot& slot = rank->slots[WriteSlot(*rank)];
  return slot.buffer && slot.buffer.use_count() > 1 && !CanSetAside(*rank, bytes);
}

void SnapshotStore::Abort(int local_rank) {
  if (Rank* rank = RankAt(local_rank); rank != nullptr && rank->begun) {
    LauncherLog()->debug("memory snapshot of local rank {} at step {} abandoned", local_rank,
                         *rank->begun);
    rank->begun.reset();
  }
}

SnapshotView SnapshotStore::ViewOf(int local_rank, const Slot& slot) {
  return SnapshotView{.local_rank = local_rank,
                      .step = slot.step,
                      .bytes = slot.bytes,
                      .meta = slot.meta,
                      .buffer = slot.buffer,
                      .generation = slot.buffer->generation()->load()};
}

std::optional<SnapshotView> SnapshotStore::Newest(int local_rank) const {
  const Rank* rank = RankAt(local_rank);
  if (rank == nullptr || rank->newest < 0 || rank->lent) return std::nullopt;
  return ViewOf(local_rank, rank->slots[rank->newest]);
}

std::optional<uint64_t> SnapshotStore::NewestStep(int local_rank) const {
  const Rank* rank = RankAt(local_rank);
  if (rank == nullptr || rank->newest < 0) return std::nullopt;
  return rank->slots[rank->newest].step;
}

std::vector<SnapshotView> SnapshotStore::Complete(int local_rank) const {
  std::vector<SnapshotView> views;
  const Rank* rank = RankAt(local_rank);
  if (rank == nullptr || rank->newest < 0 || rank->lent) return views;
  views.push_back(ViewOf(local_rank, rank->slots[rank->newest]));
  const Slot& older = rank->slots[1 - rank->newest];
  if (older.complete) views.push_back(ViewOf(local_rank, older));
  return views;
}

}  // namespace ftrun::launcher
