// Fuzz target: the lease mailbox's second page (lease_mailbox.h), which a worker writes while it
// holds a loan of both of its buffers, as the agent reads it back: LeaseMailbox::Newest, then
// SnapshotStore::Reclaim with what it found, in the order FlashService::Reclaim calls them. Each
// input gets a fresh store of one rank (a snapshot of step 1 committed, the save of step 2 begun
// and lent with it) and a fresh mailbox.
//
// Input: byte 0 is a set of flags, the rest is written over page 1 from its start (the number of
// the newest save, then the records). Flags, so that the fuzzer reaches a record that checks out:
// 1, the inode field of the record the number selects is set to a real buffer's (2: the buffer
// the newest snapshot is in, else the leased one); 4, that record's own number is set to the
// page's.
//
// For any input: no crash, no sanitizer report; a record Newest accepts has a positive size and
// a path of at most kMaxPath bytes that is empty or absolute without control characters; after
// Reclaim the rank is not lent, and its newest snapshot is the recorded save when the record
// names one of its buffers and fits it, the snapshot of step 1 when nothing was recorded, and
// none otherwise (the worker may have written both buffers); the store then takes a new save.
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "fuzz/fuzz_support.h"
#include "launcher/checkpoint/lease_mailbox.h"
#include "launcher/checkpoint/snapshot_store.h"

namespace {

using ftrun::launcher::LeaseMailbox;
using ftrun::launcher::SnapshotMeta;
using ftrun::launcher::SnapshotStore;

constexpr size_t kPage = 4096;
constexpr size_t kBytes = 4096;  // the size of both saves before the loan

struct Buffer {
  uint64_t inode = 0;
  uint64_t size = 0;
};

Buffer Describe(int fd) {
  struct stat st {};
  FTRUN_FUZZ_CHECK(::fstat(fd, &st) == 0, "fstat of a buffer");
  return {static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size)};
}

bool AbsoluteWithoutControls(const std::string& path) {
  if (path.empty() || path[0] != '/') return false;
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

FTRUN_FUZZ_INITIALIZE({})

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  SnapshotStore store(1, 1 << 20);
  auto box = LeaseMailbox::Create();
  FTRUN_FUZZ_CHECK(box.has_value(), "LeaseMailbox::Create");
  LeaseMailbox& mailbox = **box;

  // The loan, as FlashService::MaybeLend makes it.
  auto first = store.Begin(0, 1, kBytes);
  FTRUN_FUZZ_CHECK(first.has_value(), "the first Begin");
  FTRUN_FUZZ_CHECK(store.Commit(0, 1, SnapshotMeta{}).has_value(), "the first Commit");
  int newest_fd = -1;
  if (auto newest = store.Newest(0)) newest_fd = newest->fd();
  FTRUN_FUZZ_CHECK(newest_fd >= 0, "a newest snapshot before the loan");
  auto lease = store.Begin(0, 2, kBytes);
  FTRUN_FUZZ_CHECK(lease.has_value(), "the second Begin");
  FTRUN_FUZZ_CHECK(store.Lend(0).has_value(), "Lend");
  FTRUN_FUZZ_CHECK(mailbox.Grant(1, 2, lease->fd, newest_fd), "Grant");
  const Buffer leased = Describe(lease->fd);
  const Buffer held = Describe(newest_fd);

  // The worker's page, through a mapping of its own as a worker has, then the flags' repairs.
  void* mapped =
      ::mmap(nullptr, LeaseMailbox::kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, mailbox.fd(), 0);
  FTRUN_FUZZ_CHECK(mapped != MAP_FAILED, "mmap of the mailbox");
  auto* page = static_cast<uint8_t*>(mapped) + kPage;
  std::memcpy(page, data + 1, std::min(size - 1, LeaseMailbox::kBytes - kPage));
  int64_t number = 0;
  std::memcpy(&number, page, sizeof number);
  if (number >= 0 && (flags & 5) != 0) {
    uint8_t* record = page + 64 + static_cast<size_t>(number % 2) * LeaseMailbox::kRecordBytes;
    if (flags & 1) {
      const int64_t inode = static_cast<int64_t>((flags & 2) ? held.inode : leased.inode);
      std::memcpy(record + 16, &inode, sizeof inode);
    }
    if (flags & 4) std::memcpy(record, &number, sizeof number);
  }

  ::munmap(mapped, LeaseMailbox::kBytes);

  // FlashService::Reclaim.
  auto found = mailbox.Newest();
  std::optional<SnapshotStore::Recorded> recorded;
  if (found.has_value()) {
    recorded = *found;
  } else {
    recorded = SnapshotStore::Recorded{};
  }
  if (found.has_value() && *found) {
    const auto& r = **found;
    FTRUN_FUZZ_CHECK(r.bytes > 0, "a recorded save without bytes");
    FTRUN_FUZZ_CHECK(r.path.size() <= LeaseMailbox::kMaxPath, "a path over kMaxPath");
    FTRUN_FUZZ_CHECK(r.path.empty() || AbsoluteWithoutControls(r.path),
                     "a recorded path that is not absolute or holds control characters");
  }
  const auto taken = store.Reclaim(0, recorded);
  mailbox.EndLoan();
  FTRUN_FUZZ_CHECK(!store.Lent(0), "still lent after Reclaim");

  {  // the view pins its buffer: gone before the next Begin
    const auto newest = store.Newest(0);
    if (!recorded) {
      FTRUN_FUZZ_CHECK(taken.has_value(), "nothing recorded: " + taken.error().message);
      FTRUN_FUZZ_CHECK(newest && newest->step == 1 && newest->bytes == kBytes,
                       "nothing recorded, and the snapshot before the loan is not the newest");
    } else {
      const Buffer* named = recorded->inode == leased.inode ? &leased
                            : recorded->inode == held.inode ? &held
                                                            : nullptr;
      if (named != nullptr && recorded->bytes > 0 && recorded->bytes <= named->size) {
        FTRUN_FUZZ_CHECK(taken.has_value(), "a record that fits: " + taken.error().message);
        FTRUN_FUZZ_CHECK(newest && newest->step == recorded->step &&
                             newest->bytes == recorded->bytes &&
                             newest->meta.target.path == recorded->path,
                         "the newest snapshot is not the recorded save");
      } else {
        FTRUN_FUZZ_CHECK(!taken.has_value(), "a record naming no buffer of the rank was taken");
        FTRUN_FUZZ_CHECK(!newest, "a snapshot left after a record that does not check out");
      }
    }
  }

  // The store still takes a save.
  auto next = store.Begin(0, 3, kBytes);
  FTRUN_FUZZ_CHECK(next.has_value(), "a Begin after Reclaim: " + next.error().message);
  FTRUN_FUZZ_CHECK(store.Commit(0, 3, SnapshotMeta{}).has_value(), "a Commit after Reclaim");
  FTRUN_FUZZ_CHECK(store.NewestStep(0) == 3u, "the save after Reclaim is not the newest");
  return 0;
}
