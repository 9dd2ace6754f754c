// LeaseMailbox: one page of shared memory per local rank in which the agent answers the
// lease a worker asks for ahead of its next save (flash checkpoint, the one copy of a DDP
// job), instead of a message on the control channel. The worker reads the answer from its
// mapping when the next save begins: no thread of the worker wakes up for it and no
// descriptor is passed, which is most of what a save costs besides copying the state
// (ftrun-flash-checkpoint(7), PERFORMANCE). A lease whose buffer the worker has not
// mapped yet, or a refusal, sends the worker back to the ordinary request ("snapshot_begin"
// without "mailbox"), answered on the channel with the buffer's descriptor.
//
// Layout (little-endian int64s): [0] the id of the request answered, written last (release),
// [1] 1 granted / 0 refused, [2] the step leased, [3] the buffer's inode, [4] the buffer's
// size. A worker reads [0] first, then the rest; the agent writes again only after the
// worker's next request, so a reader never sees half an answer. The page is a sealed memfd
// like the snapshot buffers (memfd_buffer.h): nothing a worker does to it can fault the agent.
//
// Thread: loop only. Ownership: owns its memfd and mapping. Errors: Create names the system
// call that failed.
#pragma once

#include <cstdint>
#include <memory>

#include "common/result.h"
#include "launcher/checkpoint/memfd_buffer.h"

namespace ftrun::launcher {

class LeaseMailbox {
 public:
  static constexpr size_t kBytes = 4096;

  static Result<std::unique_ptr<LeaseMailbox>> Create();

  int fd() const { return buffer_->fd(); }
  // Forgets every answer (a new worker's request ids start again at 1).
  void Clear();
  // The answer to request `id`: the buffer of descriptor `buffer_fd` is leased for `step`.
  // False when the buffer cannot be described (fstat failed): answer on the channel instead.
  bool Grant(int64_t id, uint64_t step, int buffer_fd);
  // The answer to request `id`: no lease (the worker asks on the channel to learn why).
  void Refuse(int64_t id);

 private:
  explicit LeaseMailbox(std::shared_ptr<MemfdBuffer> buffer) : buffer_(std::move(buffer)) {}
  void Post(int64_t id, int64_t granted, int64_t step, int64_t inode, int64_t size);

  std::shared_ptr<MemfdBuffer> buffer_;
};

}  // namespace ftrun::launcher
