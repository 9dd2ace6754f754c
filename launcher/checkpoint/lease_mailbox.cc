#include "launcher/checkpoint/lease_mailbox.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "launcher/checkpoint/checkpoint_io.h"

namespace ftrun::launcher {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kRecords = kPage + 64;
constexpr size_t kLoanWord = 8;  // page 0's [8]
static_assert(kRecords + 2 * LeaseMailbox::kRecordBytes <= LeaseMailbox::kBytes);

}  // namespace

Result<std::unique_ptr<LeaseMailbox>> LeaseMailbox::Create() {
  auto buffer =
      NewMemfdBuffer<MemfdBuffer>("ftrun-lease-mailbox", kBytes, MemfdBuffer::Access::kReadWrite);
  if (!buffer) return buffer.error();
  return std::unique_ptr<LeaseMailbox>(new LeaseMailbox(std::move(*buffer)));
}

void LeaseMailbox::Clear() { std::memset(buffer_->data(), 0, kBytes); }

void LeaseMailbox::EndLoan() {
  std::atomic_ref<int64_t>(reinterpret_cast<int64_t*>(buffer_->data())[kLoanWord])
      .store(0, std::memory_order_release);
  std::memset(buffer_->data() + kPage, 0, kBytes - kPage);
}

bool LeaseMailbox::Grant(int64_t id, uint64_t step, int buffer_fd, int lent_fd) {
  struct stat st {};
  struct stat lent {};
  if (::fstat(buffer_fd, &st) != 0 || (lent_fd >= 0 && ::fstat(lent_fd, &lent) != 0)) {
    return false;
  }
  if (lent_fd >= 0) reinterpret_cast<int64_t*>(buffer_->data())[kLoanWord] = id;
  Post(id, {1, static_cast<int64_t>(step), static_cast<int64_t>(st.st_ino), st.st_size,
            lent_fd >= 0 ? 1 : 0, lent_fd >= 0 ? static_cast<int64_t>(lent.st_ino) : 0,
            lent_fd >= 0 ? lent.st_size : 0});
  return true;
}

void LeaseMailbox::Refuse(int64_t id) { Post(id, {0, 0, 0, 0, 0, 0, 0}); }

void LeaseMailbox::Post(int64_t id, const int64_t (&fields)[7]) {
  auto* words = reinterpret_cast<int64_t*>(buffer_->data());
  std::memcpy(words + 1, fields, sizeof fields);
  std::atomic_ref<int64_t>(words[0]).store(id, std::memory_order_release);
}

Result<std::optional<SnapshotStore::Recorded>> LeaseMailbox::Newest() const {
  // The worker may write this page at any time: every word is read once, into a copy.
  auto word = [this](size_t offset) {
    int64_t v = 0;
    std::memcpy(&v, buffer_->data() + offset, sizeof v);
    return v;
  };
  const int64_t number =
      std::atomic_ref<int64_t>(*reinterpret_cast<int64_t*>(buffer_->data() + kPage))
          .load(std::memory_order_acquire);
  if (number == 0) return std::optional<SnapshotStore::Recorded>();
  auto refuse = [&](const std::string& what) {
    return Error{"save record " + std::to_string(number) + ": " + what};
  };
  if (number < 0) return refuse("a negative number");
  const size_t at = kRecords + static_cast<size_t>(number % 2) * kRecordBytes;
  const int64_t fields[] = {word(at), word(at + 8), word(at + 16), word(at + 24), word(at + 32)};
  if (fields[0] != number) return refuse("the record holds save " + std::to_string(fields[0]));
  if (fields[1] < 0 || fields[3] <= 0) return refuse("a negative step or no bytes");
  if (fields[4] < 0 || static_cast<uint64_t>(fields[4]) > kMaxPath) {
    return refuse("a path length of " + std::to_string(fields[4]));
  }
  SnapshotStore::Recorded r{
      .inode = static_cast<uint64_t>(fields[2]),
      .step = static_cast<uint64_t>(fields[1]),
      .bytes = static_cast<size_t>(fields[3]),
      .path = std::string(reinterpret_cast<const char*>(buffer_->data() + at + 40),
                          static_cast<size_t>(fields[4]))};
  if (!r.path.empty() && !checkpoint_io::AbsoluteWithoutControls(r.path)) {
    return refuse("a path that is not absolute or holds control characters");
  }
  return std::optional<SnapshotStore::Recorded>(std::move(r));
}

}  // namespace ftrun::launcher
