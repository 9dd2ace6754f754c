#include "launcher/checkpoint/lease_mailbox.h"

#include <sys/stat.h>

#include <atomic>
#include <cstring>

namespace ftrun::launcher {

Result<std::unique_ptr<LeaseMailbox>> LeaseMailbox::Create() {
  auto buffer =
      NewMemfdBuffer<MemfdBuffer>("ftrun-lease-mailbox", kBytes, MemfdBuffer::Access::kReadWrite);
  if (!buffer) return buffer.error();
  return std::unique_ptr<LeaseMailbox>(new LeaseMailbox(std::move(*buffer)));
}

void LeaseMailbox::Clear() { std::memset(buffer_->data(), 0, kBytes); }

bool LeaseMailbox::Grant(int64_t id, uint64_t step, int buffer_fd) {
  struct stat st {};
  if (::fstat(buffer_fd, &st) != 0) return false;
  Post(id, 1, static_cast<int64_t>(step), static_cast<int64_t>(st.st_ino), st.st_size);
  return true;
}

void LeaseMailbox::Refuse(int64_t id) { Post(id, 0, 0, 0, 0); }

void LeaseMailbox::Post(int64_t id, int64_t granted, int64_t step, int64_t inode, int64_t size) {
  auto* words = reinterpret_cast<int64_t*>(buffer_->data());
  const int64_t fields[] = {granted, step, inode, size};
  std::memcpy(words + 1, fields, sizeof fields);
  std::atomic_ref<int64_t>(words[0]).store(id, std::memory_order_release);
}

}  // namespace ftrun::launcher
