// MemfdBuffer: anonymous shared memory for snapshots and their replicas. A memfd
// (memfd_create, MFD_CLOEXEC): no name in /dev/shm, no dependence on its size, freed by the
// kernel when its last descriptor and mapping go, however the agent exits. Sealed against
// shrinking, because its descriptor is handed to workers: none of them can make the agent's
// mapping fault. Mapped whole, read-only or read-write; grown (never shrunk) and mapped again.
//
// Thread: not thread-safe; Grow only while no other thread reads the mapping. Ownership: owns
// the descriptor and the mapping. Errors: Result/Status naming the system call and errno's text.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/result.h"

namespace ftrun::launcher {

class MemfdBuffer {
 public:
  enum class Access { kRead, kReadWrite };

  // A new memfd named `name` (as /proc shows it), sealed against shrinking, not mapped yet:
  // its descriptor, for a MemfdBuffer to own.
  static Result<int> Open(const std::string& name);

  MemfdBuffer(int fd, Access access) : fd_(fd), access_(access) {}
  virtual ~MemfdBuffer();
  MemfdBuffer(const MemfdBuffer&) = delete;
  MemfdBuffer& operator=(const MemfdBuffer&) = delete;

  // Grows the memfd to `size` and maps it again. On an error the mapping is as it was (the
  // file may have grown, which costs no memory until written).
  Status Grow(size_t size);

  int fd() const { return fd_; }
  size_t size() const { return size_; }
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  int fd_;
  Access access_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Open + Grow: a new buffer of type T (a MemfdBuffer) of `size` bytes.
template <typename T>
Result<std::shared_ptr<T>> NewMemfdBuffer(const std::string& name, size_t size,
                                          MemfdBuffer::Access access) {
  auto fd = MemfdBuffer::Open(name);
  if (!fd) return fd.error();
  auto buffer = std::make_shared<T>(*fd, access);
  if (auto grown = buffer->Grow(size); !grown) return grown.error();
  return buffer;
}

}  // namespace ftrun::launcher
