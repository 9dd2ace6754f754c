#include "launcher/channels/control_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "launcher/channels/stale_control_dirs.h"
#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;

// A worker's end of the channel: a plain blocking Unix socket in this process.
class Client {
 public:
  explicit Client(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~Client() { ::close(fd_); }
  void Send(const std::string& s) {
    ASSERT_EQ(::write(fd_, s.data(), s.size()), (ssize_t)s.size());
  }
  // What arrived so far; sets closed when the agent hung up.
  std::string Received() {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd_, buf, sizeof buf)) != 0;) {
      if (n < 0) return got_;
      got_.append(buf, n);
    }
    closed_ = true;
    return got_;
  }
  bool closed() {
    Received();
    return closed_;
  }

 private:
  int fd_ = -1;
  std::string got_;
  bool closed_ = false;
};

class ControlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ControlServer::Events ev;
    ev.on_saved = [this](int lr, uint64_t id, bool fin, bool ok, const std::string& err) {
      saved_.push_back(std::to_string(lr) + ":" + std::to_string(id) + ":" + (fin ? "F" : "S") +
                       ":" + (ok ? "ok" : "fail:" + err));
    };
    ev.on_peer_failed = [this](int lr, const std::string& err) {
      peer_failed_.push_back(std::to_string(lr) + ":" + err);
    };
    server_ = std::make_unique<ControlServer>(io_, ev);
    ASSERT_TRUE(server_->Start(dir_.path()));
    // This test process plays local rank 1 of a node whose ranks start at 4.
    server_->SetWorkers({999999, ::getpgid(0)}, 4, 2);
  }
  bool Pump(const std::function<bool()>& cond) {
    return testing::WaitFor(
        [&] {
          io_.run_for(2ms);
          return cond();
        },
        5s);
  }
  void ExpectRejected(const std::string& hello, const std::string& line, const std::string& why) {
    Client c(server_->path());
    if (!hello.empty()) c.Send(hello);
    c.Send(line);
    ASSERT_TRUE(Pump([&] { return c.closed(); })) << line;
    EXPECT_NE(c.Received().find(why), std::string::npos) << line << " -> " << c.Received();
  }

  struct Rejection {
    bool after_hello;
    std::string line;  // without its newline
    std::string why;
  };
  void ExpectAllRejected(const std::vector<Rejection>& cases) {
    for (const Rejection& r : cases)
      ExpectRejected(r.after_hello ? hello_ : "", r.line + "\n", r.why);
  }

  testing::TempDir dir_;
  boost::asio::io_context io_;
  std::unique_ptr<ControlServer> server_;
  std::vector<std::string> saved_, peer_failed_;
  const std::string hello_ = R"({"type":"hello","version":1,"rank":5,"handler":true,"group":"g1"})"
                             "\n";
};

TEST_F(ControlServerTest, SocketIsPrivate) {
  struct stat st {};
  ASSERT_EQ(::stat(std::filesystem::path(server_->path()).parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
}

TEST_F(ControlServerTest, HelloProgressSavedAndPeerFailed) {
  Client c(server_->path());
  c.Send(hello_);
  ASSERT_TRUE(Pump([&] { return c.Received().find("welcome") != std::string::npos; }));
  EXPECT_NE(c.Received().find(R"("attempt":2)"), std::string::npos) << c.Received();
  EXPECT_TRUE(server_->rank(1).connected);
  EXPECT_TRUE(server_->rank(1).has_handler);
  EXPECT_EQ(server_->rank(1).group, "g1");
  c.Send(R"({"type":"progress","step":41,"updating":true})"
         "\n");
  ASSERT_TRUE(Pump([&] { return server_->rank(1).step == 41; }));
  EXPECT_TRUE(server_->rank(1).updating);
  c.Send(R"({"type":"progress","step":41})"
         "\n"
         R"({"type":"peer_failed","error":"gloo: Connection closed by peer"})"
         "\n");
  ASSERT_TRUE(Pump([&] { return !peer_failed_.empty(); }));
  EXPECT_FALSE(server_->rank(1).updating);
  EXPECT_EQ(peer_failed_[0], "1:gloo: Connection closed by peer");
  ASSERT_TRUE(
      server_->Send(1, JsonMessage("save").Set("id", int64_t{3}).Set("step", int64_t{41}).str()));
  ASSERT_TRUE(Pump([&] { return c.Received().find(R"("type":"save")") != std::string::npos; }));
  c.Send(R"({"type":"saved","id":3,"ok":false,"error":"disk full"})"
         "\n");
  ASSERT_TRUE(Pump([&] { return !saved_.empty(); }));
  EXPECT_EQ(saved_[0], "1:3:S:fail:disk full");
  EXPECT_FALSE(server_->Send(0, "{}")) << "rank 0 never connected";
}

TEST_F(ControlServerTest, WhatADeadRankSentIsReadBeforeItsExitIsHandled) {
  auto c = std::make_unique<Client>(server_->path());
  c->Send(hello_);
  ASSERT_TRUE(Pump([&] { return c->Received().find("welcome") != std::string::npos; }));
  // The rank's last words reach the socket, then it dies before the loop reads them.
  c->Send(R"({"type":"progress","step":7})"
          "\n"
          R"({"type":"saved","id":4,"ok":true})"
          "\n"
          R"({"type":"progress","step":8)");  // cut off by the death: never handled
  c.reset();
  server_->Drain(1);
  EXPECT_EQ(server_->rank(1).step, 7);
  ASSERT_EQ(saved_.size(), 1u);
  EXPECT_EQ(saved_[0], "1:4:S:ok");
  EXPECT_FALSE(server_->Send(1, "{}")) << "the drained connection is closed";
  server_->Drain(1);  // nothing left: nothing happens
  EXPECT_EQ(saved_.size(), 1u);
}

TEST_F(ControlServerTest, ADrainStopsAtALineOverTheLimit) {
  auto c = std::make_unique<Client>(server_->path());
  c->Send(hello_);
  ASSERT_TRUE(Pump([&] { return c->Received().find("welcome") != std::string::npos; }));
  c->Send(R"({"type":"saved","id":5,"ok":true})"
          "\n" +
          std::string(kMaxControlLine + 10, 'x') + "\n" + R"({"type":"saved","id":6,"ok":true})" +
          "\n");
  c.reset();
  server_->Drain(1);
  EXPECT_EQ(saved_, std::vector<std::string>{"1:5:S:ok"});
}

TEST_F(ControlServerTest, FinishedRanksAreMarked) {
  Client c(server_->path());
  c.Send(hello_);
  c.Send(R"({"type":"progress","step":7})"
         "\n"
         R"({"type":"finished"})"
         "\n");
  ASSERT_TRUE(Pump([&] { return server_->rank(1).finished; }));
  EXPECT_EQ(server_->rank(1).step, 7);
}

TEST_F(ControlServerTest, UnknownMembersAreIgnored) {
  Client c(server_->path());
  c.Send(R"({"type":"hello","version":1,"rank":5,"pid":"informational","future":{"a":[1]}})"
         "\n"
         R"({"type":"progress","step":12,"updating":true,"loss":0.25,"tags":["x"]})"
         "\n"
         R"({"type":"saved","id":9,"ok":true,"finalize":true,"bytes":null})"
         "\n");
  ASSERT_TRUE(Pump([&] { return !saved_.empty(); }));
  EXPECT_EQ(saved_[0], "1:9:F:ok");
  EXPECT_EQ(server_->rank(1).step, 12);
  EXPECT_TRUE(server_->rank(1).updating);
  EXPECT_FALSE(c.closed());
}

TEST_F(ControlServerTest, MembersOfTheWrongTypeAreNamed) {
  ExpectAllRejected({
      {false, R"({"type":"hello","version":1,"rank":"five"})", "'rank' must be an integer"},
      {false, R"({"type":5})", "'type' must be a string"},
      {true, R"({"type":"handler","enabled":"yes"})", "'enabled' must be true or false"},
      {true, R"({"type":"group","group":["a"]})", "'group' must be a string"},
      {true, R"({"type":"progress","step":2,"updating":1})", "'updating' must be true or false"},
      {true, R"({"type":"progress","step":null})", "'step' must be an integer"},
      {true, R"({"type":"peer_failed","error":{}})", "'error' must be a string"},
      {true, R"({"type":"saved","id":1,"ok":"true"})", "'ok' must be true or false"},
      // A hello's settings are read once the connection is bound, as those of a "group".
      {false, R"({"type":"hello","version":1,"rank":5,"handler":"on"})",
       "'handler' must be true or false"},
  });
}

TEST_F(ControlServerTest, BadMessagesCloseTheConnectionWithAReason) {
  ExpectAllRejected({
      {false, "not json", "not a JSON object"},
      {false, R"({"type":"progress","step":1})", "first message must be 'hello'"},
      {false, R"({"type":"hello","version":2,"rank":5})", "protocol version 2"},
      {false, R"({"type":"hello","version":1,"rank":7})", "says rank 7 but is rank 5"},
      {true, R"({"type":"dance"})", "unknown message type 'dance'"},
      {true, R"({"type":"progress","step":"ten"})", "'step' must be an integer"},
      {true, R"({"type":"progress","step":1.5})", "'step' must be an integer"},
      {true, R"({"type":"progress"})", "without 'step'"},
      {true, R"({"type":"saved","ok":true})", "needs 'id' and 'ok'"},
      {true, R"({"nope":1})", "without a 'type'"},
  });
  ExpectRejected(hello_, std::string(70000, 'x') + "\n", "over 64 KiB");
  // The agent still serves a well-behaved worker.
  Client ok(server_->path());
  ok.Send(hello_);
  EXPECT_TRUE(Pump([&] { return server_->rank(1).connected; }));
}

TEST_F(ControlServerTest, StrangersAreRejected) {
  server_->SetWorkers({999998, 999999}, 4, 3);  // this process is not a worker now
  ExpectRejected("",
                 R"({"type":"hello","version":1,"rank":5})"
                 "\n",
                 "is not one of this agent's workers");
}

TEST_F(ControlServerTest, NewAttemptForgetsTheOldConnections) {
  Client c(server_->path());
  c.Send(hello_);
  ASSERT_TRUE(Pump([&] { return server_->rank(1).connected; }));
  server_->SetWorkers({999999, ::getpgid(0)}, 4, 3);
  EXPECT_FALSE(server_->rank(1).connected);
  EXPECT_TRUE(Pump([&] { return c.closed(); }));
}

TEST_F(ControlServerTest, StopRemovesTheSocket) {
  std::string path = server_->path();
  server_->Stop();
  EXPECT_FALSE(testing::FileExists(path));
  EXPECT_FALSE(testing::FileExists(std::filesystem::path(path).parent_path()));
}

// A Unix socket at `path` that nobody listens on any more (its agent died).
void DeadSocket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ::close(fd);  // the file stays; connecting to it is refused from now on
}

TEST(StaleControlDirs, OnlyTheDirectoriesOfDeadAgentsAreRemoved) {
  namespace fs = std::filesystem;
  testing::TempDir root;
  for (const char* d : {"ftrun-control-dead01", "ftrun-control-dead02", "ftrun-control-extra1",
                        "ftrun-control-setup1", "other-dir"}) {
    fs::create_directory(root / d);
  }
  DeadSocket(root / "ftrun-control-dead01/agent.sock");
  DeadSocket(root / "ftrun-control-dead02/agent.sock");
  DeadSocket(root / "ftrun-control-extra1/agent.sock");
  std::ofstream(root / "ftrun-control-extra1/note") << "not ours to remove";
  DeadSocket(root / "other-dir/agent.sock");
  boost::asio::io_context io;
  ControlServer live(io, {});
  ASSERT_TRUE(live.Start(root.path()));  // removes both dead ones on its way
  EXPECT_FALSE(fs::exists(root / "ftrun-control-dead01"));
  EXPECT_FALSE(fs::exists(root / "ftrun-control-dead02"));
  EXPECT_TRUE(fs::exists(root / "ftrun-control-extra1/note"));
  EXPECT_TRUE(fs::exists(root / "ftrun-control-setup1"));  // no socket yet: being set up
  EXPECT_TRUE(fs::exists(root / "other-dir/agent.sock"));
  EXPECT_EQ(RemoveStaleControlDirs(root.path()), 0) << "a live agent's directory is kept";
  EXPECT_TRUE(fs::exists(live.path()));
}

// Issue 17: a line 30,000 levels deep, sent before any "hello", is refused at once (it took
// the parser about 20 s on the loop); the agent goes on serving its worker.
TEST_F(ControlServerTest, DeepLinesAreRefusedWithoutStallingTheLoop) {
  Client worker(server_->path());
  worker.Send(hello_);
  ASSERT_TRUE(Pump([&] { return worker.Received().find("welcome") != std::string::npos; }));
  const std::string deep =
      R"({"type":"hello","x":)" + std::string(30000, '[') + std::string(30000, ']') + "}\n";
  std::vector<std::unique_ptr<Client>> attackers;
  for (int i = 0; i < 4; ++i) {
    attackers.push_back(std::make_unique<Client>(server_->path()));
    attackers.back()->Send(deep);
  }
  const auto started = std::chrono::steady_clock::now();
  ASSERT_TRUE(Pump([&] {
    for (auto& a : attackers) {
      if (!a->closed()) return false;
    }
    return true;
  }));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);  // was 4 x 20 s
  EXPECT_NE(attackers[0]->Received().find("nested deeper than 32 levels"), std::string::npos)
      << attackers[0]->Received();
  worker.Send(R"({"type":"progress","step":7})"
              "\n");
  ASSERT_TRUE(Pump([&] { return server_->rank(1).step == 7; }));
}

// A connection that never says "hello" is closed after the hello timeout; one that did stays.
TEST_F(ControlServerTest, SilentConnectionsAreClosedAfterTheHelloTimeout) {
  server_->TEST_SetHelloTimeout(200ms);
  Client silent(server_->path());
  Client worker(server_->path());
  worker.Send(hello_);
  ASSERT_TRUE(Pump([&] { return silent.closed(); }));
  EXPECT_NE(silent.Received().find("no 'hello' within 200 ms"), std::string::npos)
      << silent.Received();
  EXPECT_FALSE(worker.closed());
  EXPECT_TRUE(server_->rank(1).connected);
}

// At most kMaxUnboundControlConnections wait for their "hello": more close the oldest ones,
// and a worker still connects and is served.
TEST_F(ControlServerTest, ConnectionsWithoutHelloAreCapped) {
  std::vector<std::unique_ptr<Client>> flood;
  const size_t extra = 10;
  for (size_t i = 0; i < kMaxUnboundControlConnections + extra; ++i) {
    flood.push_back(std::make_unique<Client>(server_->path()));
    io_.poll();  // accept as they come, as the loop would
  }
  auto closed_count = [&] {
    size_t n = 0;
    for (auto& c : flood) n += c->closed() ? 1 : 0;
    return n;
  };
  ASSERT_TRUE(Pump([&] { return closed_count() == extra; })) << closed_count();
  for (size_t i = 0; i < extra; ++i) EXPECT_TRUE(flood[i]->closed()) << i;  // the oldest
  EXPECT_NE(flood[0]->Received().find("wait for their 'hello'"), std::string::npos);
  Client worker(server_->path());
  worker.Send(hello_);
  ASSERT_TRUE(Pump([&] { return worker.Received().find("welcome") != std::string::npos; }));
  EXPECT_EQ(closed_count(), extra + 1);  // room was made for the worker
}

}  // namespace
}  // namespace ftrun::launcher
