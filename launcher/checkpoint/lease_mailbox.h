// LeaseMailbox: one page of shared memory per local rank in which the agent answers the
// lease a worker asks for ahead of its next save (flash checkpoint, the one copy of a DDP
// job), instead of a message on the control channel. The worker reads the answer from its
// mapping when the next save begins: no thread of the worker wakes up for it and no
// descriptor is passed, which is most of what a save costs besides copying the state
// (ftrun-flash-checkpoint(7), PERFORMANCE). A lease whose buffer the worker has not
// mapped yet, or a refusal, sends the worker back to the ordinary request ("snapshot_begin"
// without "mailbox"), answered on the channel with the buffer's descriptor.
//
// A lease may come with a loan of both of the rank's buffers (every-step saves of the one
// copy): the worker then saves into them alternately without asking, and records each save
// in the second page instead of sending "snapshot_commit", so a save makes no system call and
// wakes no thread of the agent. The agent reads that page back when the worker next speaks
// about snapshots or exits (FlashService, SnapshotStore::Reclaim).
//
// Page 0, the agent's answers (little-endian int64s): [0] the id of the request answered,
// written last (release), [1] 1 granted / 0 refused, [2] the step leased, [3] the buffer's
// inode, [4] the buffer's size, [5] 1 when both buffers are lent, [6] the other buffer's
// inode, [7] its size; [8] the id of the loan in force (the request's), 0 once the agent has
// ended it (the worker checks it before each save under the loan). A worker reads [0] first,
// then the rest; the agent writes again only after the worker's next request, so a reader
// never sees half an answer.
// Page 1, the worker's saves under a loan: [0] the number of the newest save recorded (0:
// none), written after its record; the record of save n at byte 64 + (n % 2) * 2016: [0] n,
// [1] the step, [2] the inode of the buffer written, [3] the snapshot's size, [4] the length
// of the path it is persisted to, then that many bytes of the path (absolute, no control
// characters, at most kMaxPath). A worker killed while writing a record leaves the previous
// one whole. The agent trusts nothing in it: a record that does not check out is reported
// as such (the worker may have written either buffer).
//
// The pages are a sealed memfd like the snapshot buffers (memfd_buffer.h): nothing a worker
// does to it can fault the agent.
//
// Thread: loop only. Ownership: owns its memfd and mapping. Errors: Create names the system
// call that failed; Newest, what in a record does not check out.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"
#include "launcher/checkpoint/memfd_buffer.h"
#include "launcher/checkpoint/snapshot_store.h"

namespace ftrun::launcher {

class LeaseMailbox {
 public:
  static constexpr size_t kBytes = 8192;
  static constexpr size_t kRecordBytes = 2016;
  static constexpr size_t kMaxPath = kRecordBytes - 5 * 8;

  static Result<std::unique_ptr<LeaseMailbox>> Create();

  int fd() const { return buffer_->fd(); }
  // Forgets every answer and record (a new worker's request ids start again at 1).
  void Clear();
  // The answer to request `id`: the buffer of descriptor `buffer_fd` is leased for `step`;
  // with `lent_fd` >= 0 that buffer is lent too (see above). False when a buffer cannot be
  // described (fstat failed): answer on the channel instead, and lend nothing.
  bool Grant(int64_t id, uint64_t step, int buffer_fd, int lent_fd = -1);
  // The newest save recorded in page 1 (nullopt: none), or an error saying what did not
  // check out.
  Result<std::optional<SnapshotStore::Recorded>> Newest() const;
  // Forgets the recorded saves and the loan in force (the loan is over).
  void EndLoan();
  // The answer to request `id`: no lease (the worker asks on the channel to learn why).
  void Refuse(int64_t id);

 private:
  explicit LeaseMailbox(std::shared_ptr<MemfdBuffer> buffer) : buffer_(std::move(buffer)) {}
  void Post(int64_t id, const int64_t (&fields)[7]);

  std::shared_ptr<MemfdBuffer> buffer_;
};

}  // namespace ftrun::launcher
