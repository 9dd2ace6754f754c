// FlashService lending both of a rank's buffers for every-step saves (lease_mailbox.h): the
// saves under the loan are recorded in the mailbox's second page, and the agent takes the
// newest one back as a commit when the rank speaks about snapshots or exits; a record that does
// not check out is no snapshot, and nothing of the rank is readable while lent.
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/unit/launcher/checkpoint/flash_service_fixture.h"

namespace ftrun::launcher {
namespace {

using testing::FlashServiceTest;
using testing::Target;

class FlashLoanTest : public FlashServiceTest {
 protected:
  void TearDown() override {
    if (page_ != nullptr) ::munmap(page_, bytes_);
    FlashServiceTest::TearDown();
  }
  // Maps rank 0's mailbox as the worker does (both pages, writable).
  void OpenMailbox() {
    if (page_ != nullptr) ::munmap(page_, bytes_);
    page_ = nullptr;
    v1::ControlSnapshotMailbox ask;
    ask.set_id(++id_);
    service().Mailbox(0, ask);
    const Sent handed = sent_.back();
    ASSERT_EQ(handed.type(), "snapshot_mailbox") << handed.error();
    bytes_ = static_cast<size_t>(handed.at("bytes").number_value());
    ASSERT_EQ(bytes_, LeaseMailbox::kBytes);
    page_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, handed.fd, 0);
    ASSERT_NE(page_, MAP_FAILED);
  }
  int64_t* words() const { return static_cast<int64_t*>(page_); }
  // Steps 1 and 2 saved the ordinary way (fds kept: the buffers), then the lease of step 3
  // asked for ahead with a loan.
  void SaveTwiceThenAskForALoan(bool loan = true) {
    OpenMailbox();
    Save(0, 1, "one", "", target_);
    first_ = sent_[sent_.size() - 2];
    Save(0, 2, "two", "", target_);
    second_ = sent_[sent_.size() - 2];
    ahead_.set_id(++id_);
    ahead_.set_step(3);
    ahead_.set_bytes(5);
    ahead_.set_mailbox(true);
    ahead_.set_loan(loan);
    service().Begin(0, ahead_);
    ASSERT_EQ(words()[0], ahead_.id());
    ASSERT_EQ(words()[1], 1) << "granted";
  }
  static uint64_t Inode(int fd) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  }
  // The worker's save n under the loan: `content` into the buffer of `fd`, then its record.
  void Record(int64_t n, int64_t step, int fd, const std::string& content,
              const std::string& path = "", int64_t inode = -1) {
    ASSERT_EQ(::pwrite(fd, content.data(), content.size(), 0),
              static_cast<ssize_t>(content.size()));
    auto* at = reinterpret_cast<std::byte*>(page_) + 4096 + 64 + (n % 2) * 2016;
    const int64_t fields[] = {n, step, inode >= 0 ? inode : static_cast<int64_t>(Inode(fd)),
                              static_cast<int64_t>(content.size()),
                              static_cast<int64_t>(path.size())};
    std::memcpy(at, fields, sizeof fields);
    std::memcpy(at + sizeof fields, path.data(), path.size());
    words()[512] = n;
  }

  Target target_{.root = "/nonexistent/ckpt", .path = "", .tracker = "t"};
  v1::ControlSnapshotBegin ahead_;
  Sent first_, second_;
  void* page_ = nullptr;
  size_t bytes_ = 0;
};

TEST_F(FlashLoanTest, SavesUnderALoanAreTakenBackWhenTheRankExits) {
  SaveTwiceThenAskForALoan();
  EXPECT_EQ(words()[5], 1) << "both buffers lent";
  EXPECT_EQ(words()[8], ahead_.id()) << "the loan in force";
  EXPECT_EQ(service().NewestStep(0), 2u);
  EXPECT_EQ(static_cast<uint64_t>(words()[3]), Inode(first_.fd)) << "step 1's buffer leased";
  EXPECT_EQ(static_cast<uint64_t>(words()[6]), Inode(second_.fd)) << "step 2's lent with it";
  EXPECT_TRUE(Steps(1).empty()) << "a lent rank's buffers are not readable";
  EXPECT_FALSE(service().store().Newest(0));

  Record(1, 3, first_.fd, "three");
  Record(2, 4, second_.fd, "fou", "/nonexistent/ckpt/4/rank_0.pt");  // the buffer's 3 bytes
  EXPECT_EQ(service().NewestStep(0), 4u) << "reported before it is taken back";
  std::vector<uint64_t> reclaimed;
  service().SetOnReclaimed([&](int lr, uint64_t step) {
    EXPECT_EQ(lr, 0);
    reclaimed.push_back(step);
  });
  ASSERT_EQ(::pwrite(first_.fd, "fiv", 3, 0), 3);  // save 3 begun, never recorded
  service().WorkerExited(0);
  EXPECT_EQ(Steps(1), std::vector<int64_t>{4}) << "the buffer being written is no snapshot";
  EXPECT_EQ(Get(1, 4), "fou");
  const auto newest = service().store().Newest(0);
  ASSERT_TRUE(newest);
  EXPECT_EQ(newest->meta.target.path, "/nonexistent/ckpt/4/rank_0.pt");
  EXPECT_EQ(newest->meta.target.root, "/nonexistent/ckpt") << "as with the save before the loan";
  EXPECT_EQ(words()[512], 0) << "the records are cleared";
  EXPECT_EQ(words()[8], 0) << "and the loan is over";
  EXPECT_EQ(reclaimed, std::vector<uint64_t>{4});
}

TEST_F(FlashLoanTest, ARankKilledBeforeItsFirstRecordKeepsTheSnapshotBeforeTheLoan) {
  SaveTwiceThenAskForALoan();
  ASSERT_EQ(::pwrite(first_.fd, "thr", 3, 0), 3);  // killed mid-save
  service().WorkerExited(0);
  EXPECT_EQ(Steps(1), (std::vector<int64_t>{2}));
  EXPECT_EQ(Get(1, 2), "two");
}

TEST_F(FlashLoanTest, AnyRequestAboutSnapshotsEndsTheLoanAndALeaseNotUsedUnderItStillCommits) {
  SaveTwiceThenAskForALoan();
  // The worker did not take the loan: it saves step 3 into the lease and commits it.
  ASSERT_EQ(::pwrite(first_.fd, "three", 5, 0), 5);
  const Sent& committed = Commit(0, 3, target_);
  EXPECT_TRUE(committed.flag("ok")) << committed.error();
  EXPECT_EQ(Steps(0), (std::vector<int64_t>{3, 2}));

  // A loan used once, then the rank asks which steps there are: the record is taken first.
  ahead_.set_id(++id_);
  ahead_.set_step(4);
  service().Begin(0, ahead_);
  ASSERT_EQ(words()[5], 1);
  Record(1, 4, second_.fd, "fou");
  EXPECT_EQ(Steps(0), std::vector<int64_t>{4});
  EXPECT_EQ(Get(0, 4), "fou");
  EXPECT_TRUE(service().store().Newest(0));
}

TEST_F(FlashLoanTest, ARecordThatDoesNotCheckOutLeavesNoSnapshot) {
  SaveTwiceThenAskForALoan();
  Record(1, 3, first_.fd, "three", "", 12345);  // a buffer that is not the rank's
  service().WorkerExited(0);
  EXPECT_TRUE(Steps(1).empty()) << "the worker may have written both buffers";

  // Records that do not check out: the same (the worker may have written both buffers).
  using Spoil = std::function<void(int64_t * record)>;
  for (const Spoil& spoil : std::vector<Spoil>{
           [](int64_t* r) { r[4] = 1 << 20; },  // a path longer than the record can hold
           [](int64_t* r) { r[0] = 7; },        // the record of another save
           [](int64_t* r) { r[3] = 0; },        // no bytes
           [](int64_t* r) {                     // a relative path
             r[4] = 3;
             std::memcpy(r + 5, "a/b", 3);
           },
           [this](int64_t*) { words()[512] = -1; }}) {
    SaveTwiceThenAskForALoan();
    Record(1, 3, first_.fd, "three", "/ckpt/3");
    spoil(reinterpret_cast<int64_t*>(static_cast<std::byte*>(page_) + 4096 + 64 + 2016));
    service().WorkerExited(0);
    EXPECT_TRUE(Steps(1).empty());
  }
  // The longest path fits the odd record's room inside the mailbox.
  SaveTwiceThenAskForALoan();
  const std::string longest = "/" + std::string(LeaseMailbox::kMaxPath - 1, 'p');
  Record(1, 3, first_.fd, "three", longest);
  service().WorkerExited(0);
  ASSERT_EQ(Steps(1), (std::vector<int64_t>{3}));
  EXPECT_EQ(service().store().Newest(0)->meta.target.path, longest);
}

TEST_F(FlashLoanTest, NoLoanForAWorkerThatDoesNotAskOrAfterASaveToPersist) {
  SaveTwiceThenAskForALoan(false);
  EXPECT_EQ(words()[5], 0);
  ASSERT_EQ(::pwrite(first_.fd, "three", 5, 0), 5);
  Commit(0, 3, Target{.root = "/nonexistent/ckpt", .path = "", .tracker = "t", .persist = true});
  ahead_.set_id(++id_);
  ahead_.set_step(4);
  ahead_.set_loan(true);
  service().Begin(0, ahead_);
  EXPECT_EQ(words()[0], ahead_.id());
  EXPECT_EQ(words()[5], 0) << "the last save was persisted: the agent reads each one";
}

TEST_F(FlashLoanTest, NoLoanWhenLendingIsOff) {
  service().SetLending(false);  // FTRUN_FLASH_LOAN=0, or replicas
  SaveTwiceThenAskForALoan();
  EXPECT_EQ(words()[5], 0);
  ASSERT_EQ(::pwrite(first_.fd, "three", 5, 0), 5);
  EXPECT_TRUE(Commit(0, 3, target_).flag("ok"));
}

}  // namespace
}  // namespace ftrun::launcher
