// The control channel's flash-checkpoint side: snapshot requests routed to their handlers (or
// refused without one) and descriptors passed with SCM_RIGHTS, in order with the text.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ftrun/v1/control.pb.h"
#include "launcher/channels/control_server.h"
#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;

// A descriptor received, with the stream range of the read that brought it.
struct ReceivedFd {
  size_t begin = 0;
  size_t end = 0;
  int fd = -1;
};

// A worker's end of the channel reading with recvmsg, so descriptors are kept.
class FdClient {
 public:
  explicit FdClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~FdClient() {
    for (const auto& r : fds_) ::close(r.fd);
    ::close(fd_);
  }
  void Send(const std::string& s) {
    ASSERT_EQ(::write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  // Reads everything there is now; returns all the text received so far.
  const std::string& Received() {
    for (;;) {
      std::vector<char> buf(1 << 16);
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = ::recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n <= 0) return got_;
      EXPECT_EQ(msg.msg_flags & MSG_CTRUNC, 0);
      for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
          fds_.push_back({got_.size(), got_.size() + static_cast<size_t>(n), fd});
        }
      }
      got_.append(buf.data(), static_cast<size_t>(n));
    }
  }
  // Bytes waiting in the socket, not read yet.
  int Pending() const {
    int n = 0;
    ::ioctl(fd_, FIONREAD, &n);
    return n;
  }
  const std::vector<ReceivedFd>& fds() const { return fds_; }

 private:
  int fd_ = -1;
  std::string got_;
  std::vector<ReceivedFd> fds_;
};

// A memfd holding `content`.
int MemFd(const std::string& content) {
  int fd = ::memfd_create("control-fd-test", MFD_CLOEXEC);
  EXPECT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  return fd;
}

bool SameFile(int a, int b) {
  struct stat sa {};
  struct stat sb {};
  return ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// Descriptors of this process open on the file of `fd` (itself included).
int OpenCopies(int fd) {
  int copies = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int other = std::stoi(entry.path().filename().string());
    if (SameFile(fd, other)) ++copies;
  }
  return copies;
}

// A JSON object of `bytes` - 1 bytes: a line of `bytes` with the newline the server adds.
std::string Padded(int index, size_t bytes) {
  std::string head = R"({"type":"pad","index":)" + std::to_string(index) + R"(,"x":")";
  return head + std::string(bytes - head.size() - 3, 'x') + "\"}";
}

class ControlFdTest : public ::testing::Test {
 protected:
  ~ControlFdTest() override {
    server_.reset();
    io_.poll();  // handlers still holding connections let go of their descriptors
    for (int fd : fds_) ::close(fd);
  }
  void Start(ControlServer::Events events = {}) {
    server_ = std::make_unique<ControlServer>(io_, std::move(events));
    ASSERT_TRUE(server_->Start(dir_.path()));
    server_->SetWorkers({::getpgid(0)}, 0, 1);  // this process is local rank 0
  }
  // A client that said hello and read the welcome.
  std::unique_ptr<FdClient> Connect() {
    auto c = std::make_unique<FdClient>(server_->path());
    c->Send(R"({"type":"hello","version":1,"rank":0})"
            "\n");
    EXPECT_TRUE(Pump([&] { return c->Received().find("welcome") != std::string::npos; }));
    return c;
  }
  bool Pump(const std::function<bool()>& cond) {
    return ftrun::testing::WaitFor(
        [&] {
          io_.run_for(1ms);
          return cond();
        },
        5s);
  }
  int Fd(const std::string& content) { return fds_.emplace_back(MemFd(content)); }

  ftrun::testing::TempDir dir_;
  boost::asio::io_context io_;
  std::unique_ptr<ControlServer> server_;
  std::vector<int> fds_;
};

TEST_F(ControlFdTest, SnapshotRequestsWithoutAHandlerAreRefused) {
  Start();
  auto c = Connect();
  c->Send(R"({"type":"snapshot_steps","id":4})"
          "\n"
          R"({"type":"snapshot_begin","id":5,"step":1,"bytes":10})"
          "\n");
  ASSERT_TRUE(Pump([&] { return c->Received().find(R"("id":5)") != std::string::npos; }));
  auto lines = ftrun::testing::Lines(c->Received());
  ASSERT_EQ(lines.size(), 3u) << c->Received();
  for (const std::string& line : {lines[1], lines[2]}) {
    EXPECT_NE(line.find(R"("type":"snapshot_refused")"), std::string::npos) << line;
    EXPECT_NE(line.find("this ftrun agent keeps no memory snapshots"), std::string::npos);
  }
  EXPECT_NE(lines[1].find(R"("id":4)"), std::string::npos) << lines[1];
  EXPECT_TRUE(server_->rank(0).connected) << "a refusal is an answer, not an error";
  EXPECT_TRUE(c->fds().empty());
}

TEST_F(ControlFdTest, SnapshotRequestsReachTheirHandlers) {
  std::vector<std::string> seen;
  ControlServer::Events ev;
  ev.on_snapshot_begin = [&](int lr, const v1::ControlSnapshotBegin& r) {
    seen.push_back("begin " + std::to_string(lr) + " " + std::to_string(r.id()) + " " +
                   std::to_string(r.step()) + " " + std::to_string(r.bytes()) + " " + r.group());
  };
  ev.on_snapshot_commit = [&](int, const v1::ControlSnapshotCommit& r) {
    seen.push_back("commit " + std::to_string(r.step()) + " " + r.root() + " " +
                   std::to_string(r.world_size()) + (r.persist() ? " persist" : ""));
  };
  ev.on_snapshot_steps = [&](int, const v1::ControlSnapshotSteps& r) {
    seen.push_back("steps " + r.group());
  };
  ev.on_snapshot_get = [&](int, const v1::ControlSnapshotGet& r) {
    seen.push_back("get " + std::to_string(r.step()) + " " + r.group());
  };
  Start(std::move(ev));
  auto c = Connect();
  c->Send(R"({"type":"snapshot_begin","id":1,"step":3,"bytes":100,"group":"rank-1"})"
          "\n"
          R"({"type":"snapshot_commit","id":2,"step":3,"root":"/ckpt","world_size":2,)"
          R"("persist":true})"
          "\n"
          R"({"type":"snapshot_steps","id":3,"group":"rank-1"})"
          "\n"
          R"({"type":"snapshot_get","id":4,"step":3,"group":"rank-1"})"
          "\n");
  ASSERT_TRUE(Pump([&] { return seen.size() == 4; }));
  EXPECT_EQ(seen, (std::vector<std::string>{"begin 0 1 3 100 rank-1", "commit 3 /ckpt 2 persist",
                                            "steps rank-1", "get 3 rank-1"}));
  // A begin without its size is a broken worker: the connection goes, with the reason.
  c->Send(R"({"type":"snapshot_begin","id":5,"step":4})"
          "\n");
  ASSERT_TRUE(Pump([&] { return !server_->rank(0).connected; }));
  EXPECT_NE(c->Received().find("'snapshot_begin' needs 'step' and 'bytes'"), std::string::npos)
      << c->Received();
}

TEST_F(ControlFdTest, ADescriptorTravelsWithItsMessage) {
  Start();
  auto c = Connect();
  int memfd = Fd("snapshot bytes");
  const size_t start = c->Received().size();
  ASSERT_TRUE(server_->Send(0, R"({"type":"snapshot","id":1,"fd":true})", memfd));
  EXPECT_FALSE(server_->Send(1, R"({"type":"snapshot"})", memfd)) << "no such rank";
  ASSERT_TRUE(Pump([&] { return !c->Received().empty() && !c->fds().empty(); }));
  ASSERT_EQ(c->fds().size(), 1u);
  const ReceivedFd& got = c->fds()[0];
  EXPECT_TRUE(SameFile(got.fd, memfd));
  EXPECT_LE(got.begin, start);
  EXPECT_GT(got.end, start) << "the descriptor comes with the message's first byte";
  char buf[14];
  EXPECT_EQ(::pread(got.fd, buf, sizeof buf, 0), 14);
  EXPECT_EQ(std::string(buf, sizeof buf), "snapshot bytes");
  EXPECT_EQ(c->Received().substr(start), "{\"type\":\"snapshot\",\"id\":1,\"fd\":true}\n");
  // The sender's descriptor is its own still; the server kept no copy.
  EXPECT_EQ(OpenCopies(memfd), 2) << "the sender's and the one received";
}

TEST_F(ControlFdTest, AFullSocketHoldsTheDescriptorUntilTheWorkerReads) {
  // How many 1000-byte messages fill a Unix socket (each one buffer of its own): measured on
  // a pair with the same default buffer size, so the server's messages fill its socket
  // exactly and the descriptor's sendmsg meets EAGAIN.
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  const std::string line = Padded(0, 1000) + "\n";
  int fill = 0;
  while (::send(pair[0], line.data(), line.size(), MSG_DONTWAIT) ==
         static_cast<ssize_t>(line.size())) {
    ++fill;
  }
  ::close(pair[0]);
  ::close(pair[1]);
  ASSERT_GT(fill, 10);

  Start();
  auto c = Connect();
  const size_t start = c->Received().size();
  for (int i = 0; i < fill; ++i) ASSERT_TRUE(server_->Send(0, Padded(i, 1000)));
  int memfd = Fd("held");
  ASSERT_TRUE(server_->Send(0, R"({"type":"snapshot","id":9})", memfd));
  ASSERT_TRUE(server_->Send(0, R"({"type":"after"})"));
  io_.poll();
  EXPECT_EQ(c->Pending(), fill * 1000) << "every message before the descriptor is in the socket";
  EXPECT_EQ(OpenCopies(memfd), 2) << "the server holds its copy while the socket is full";
  ASSERT_TRUE(Pump([&] { return c->Received().find(R"({"type":"after"})") != std::string::npos; }));
  ASSERT_EQ(c->fds().size(), 1u);
  EXPECT_TRUE(SameFile(c->fds()[0].fd, memfd));
  const size_t at = c->Received().find(R"({"type":"snapshot","id":9})");
  EXPECT_EQ(at, start + static_cast<size_t>(fill) * 1000);
  EXPECT_LE(c->fds()[0].begin, at);
  EXPECT_GT(c->fds()[0].end, at);
  EXPECT_EQ(OpenCopies(memfd), 2) << "the server let go of its copy once sent";
}

TEST_F(ControlFdTest, LargeMessagesBeforeADescriptorArriveInOrder) {
  Start();
  auto c = Connect();
  const size_t start = c->Received().size();
  constexpr int kLarge = 40;  // 2.4 MB: many times what the socket holds
  for (int i = 0; i < kLarge; ++i) ASSERT_TRUE(server_->Send(0, Padded(i, 60000)));
  int memfd = Fd("after the flood");
  ASSERT_TRUE(server_->Send(0, R"({"type":"snapshot","id":1})", memfd));
  ASSERT_TRUE(server_->Send(0, Padded(kLarge, 60000)));
  int second = Fd("second");
  ASSERT_TRUE(server_->Send(0, R"({"type":"snapshot","id":2})", second));
  ASSERT_TRUE(Pump([&] { return !c->Received().empty() && c->fds().size() == 2; }));
  const std::string& got = c->Received();
  std::string expected;
  for (int i = 0; i < kLarge; ++i) expected += Padded(i, 60000) + "\n";
  expected += "{\"type\":\"snapshot\",\"id\":1}\n" + Padded(kLarge, 60000) + "\n" +
              "{\"type\":\"snapshot\",\"id\":2}\n";
  ASSERT_EQ(got.size() - start, expected.size());
  EXPECT_TRUE(got.compare(start, expected.size(), expected) == 0) << "bytes out of order";
  const int fds[] = {memfd, second};
  const std::string lines[] = {R"({"type":"snapshot","id":1})", R"({"type":"snapshot","id":2})"};
  for (int i = 0; i < 2; ++i) {
    const ReceivedFd& r = c->fds()[i];
    const size_t at = got.find(lines[i]);
    EXPECT_TRUE(SameFile(r.fd, fds[i])) << i;
    EXPECT_LE(r.begin, at) << i;
    EXPECT_GT(r.end, at) << i;
  }
}

TEST_F(ControlFdTest, ADescriptorNotSentIsClosedWithItsConnection) {
  Start();
  auto c = Connect();
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(server_->Send(0, Padded(i, 60000)));
  int memfd = Fd("never read");
  ASSERT_TRUE(server_->Send(0, R"({"type":"snapshot"})", memfd));
  io_.poll();
  EXPECT_EQ(OpenCopies(memfd), 2) << "queued behind what the worker has not read";
  server_.reset();
  io_.poll();
  EXPECT_EQ(OpenCopies(memfd), 1) << "the queued copy is closed with the connection";
}

}  // namespace
}  // namespace ftrun::launcher
