// The agent under test: real Agent, real control channel (a Unix socket in a temp dir), fake
// spawner, clock, coordinator and planner. Tests play the rendezvous through the Listener
// calls, end workers through the fake children, and move time with the clock.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <string>

#include "launcher/agent/agent.h"
#include "tests/support/fake_clock.h"
#include "tests/unit/launcher/agent/agent_fakes.h"

namespace ftrun::testing {

using launcher::AgentState;

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config.nproc_per_node = 2;
    config.max_restarts = 3;
    config.shutdown_timeout = std::chrono::milliseconds(5000);
    char tmpl[] = "/tmp/ftrun-agent-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmpdir = tmpl;
  }
  void TearDown() override {
    agent.reset();
    std::filesystem::remove_all(tmpdir);
  }

  // Builds and starts the agent (it joins: the coordinator's Start follows).
  void StartAgent(bool expect_started = true) {
    std::promise<std::string> host;
    host.set_value("node0");
    launcher::AgentOptions o;
    o.config = &config;
    o.agent_env = {{"TMPDIR", tmpdir}};
    o.host = host.get_future().share();
    planner = new FakePlanner(config.nproc_per_node);
    o.planner.reset(planner);
    o.spawner = &spawner;
    o.clock = &clock;
    o.signal_exit_code = signal_exit_code;
    o.watchdog_fifo = watchdog_fifo;
    o.events = events;
    agent =
        std::make_unique<launcher::Agent>(io, std::move(o), std::make_unique<FakeCoordinator>(log));
    ASSERT_EQ(agent->Start(), expect_started);
    Settle();
  }

  // Runs every handler that is ready now (posted exits, socket reads, signals).
  void Settle() {
    for (int i = 0; i < 3; ++i) {
      io.restart();
      io.poll();
    }
  }

  // The agent up and round 1's workers running.
  void StartFirstRound() {
    StartAgent();
    StartRound(1);
  }
  // Worker `i` exits with code 1 and the agent has seen it.
  void FailWorker(size_t i) {
    child(i).Exit(1);
    Settle();
  }

  // The fake clock moves on and the loop runs what fell due.
  void AdvanceAndSettle(std::chrono::steady_clock::duration d) {
    clock.Advance(d);
    Settle();
  }

  static rendezvous::NodeAssignment Round(uint64_t round, int restart = 0, int nodes = 1,
                                          int group_rank = 0, int nproc = 2) {
    rendezvous::NodeAssignment a;
    a.round = round;
    a.restart_count = restart;
    a.group_rank = group_rank;
    a.group_world_size = nodes;
    a.base_rank = group_rank * nproc;
    a.world_size = nodes * nproc;
    a.master_addr = "127.0.0.1";
    a.master_port = 29500;
    return a;
  }

  // Starts a round and checks its workers were spawned.
  void StartRound(uint64_t round, int restart = 0, int nodes = 1, int group_rank = 0) {
    const int before = spawner.spawned;
    agent->OnRoundStarted(Round(round, restart, nodes, group_rank, planner_nproc()));
    Settle();
    ASSERT_EQ(spawner.spawned - before, planner_nproc());
    ASSERT_EQ(agent->state(), AgentState::kRunning);
  }
  int planner_nproc() const { return static_cast<int>(config.nproc_per_node); }

  void ExpectFinished(int exit_code) {
    EXPECT_EQ(agent->state(), AgentState::kFinished);
    EXPECT_EQ(agent->exit_code(), exit_code);
  }
  // The group has stopped and the agent said so to the coordinator (`reports` times in all).
  void ExpectStoppedAndWaiting(int reports) {
    EXPECT_EQ(agent->state(), AgentState::kWaiting);
    EXPECT_EQ(log->stopped, reports);
  }

  FakeChild& child(size_t i) { return *spawner.children.at(i); }
  bool MetricSays(const std::string& line) const {
    return agent->RenderMetrics().find(line + "\n") != std::string::npos;
  }

  // A worker's side of the control channel, as the Python helper speaks it.
  class Worker {
   public:
    Worker(AgentTest& t, const std::string& path) : t_(t) {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
      connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    }
    ~Worker() { ::close(fd_); }
    bool connected() const { return connected_; }
    void Send(const std::string& line) {
      const std::string l = line + "\n";
      ASSERT_EQ(::write(fd_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
      t_.Settle();
    }
    // The next line from the agent, pumping the loop meanwhile ("" after 5 s).
    std::string Receive() {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (std::chrono::steady_clock::now() < deadline) {
        if (auto nl = buf_.find('\n'); nl != std::string::npos) {
          std::string line = buf_.substr(0, nl);
          buf_.erase(0, nl + 1);
          return line;
        }
        t_.Settle();
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 1) == 1) {
          char chunk[4096];
          const ssize_t n = ::read(fd_, chunk, sizeof(chunk));
          if (n <= 0) return "";
          buf_.append(chunk, n);
        }
      }
      return "";
    }

   private:
    AgentTest& t_;
    int fd_ = -1;
    bool connected_ = false;
    std::string buf_;
  };

  // Connects rank `rank` (whose child must have this test's process group as its pid) with
  // a save handler, and reports progress at `step`.
  std::unique_ptr<Worker> ConnectRank(int rank, int64_t step) {
    auto w = std::make_unique<Worker>(*this, child(0).spec.env.at("FTRUN_CONTROL_SOCKET"));
    EXPECT_TRUE(w->connected());
    w->Send(R"({"type":"hello","version":1,"rank":)" + std::to_string(rank) +
            R"(,"handler":true})");
    EXPECT_NE(w->Receive().find("welcome"), std::string::npos);
    w->Send(R"({"type":"progress","step":)" + std::to_string(step) + R"(,"updating":false})");
    return w;
  }
  // --hang-timeout 5 s, checked every second, and round 1 running with rank 0 connected and
  // reporting `step` (its own process group, so that stack dumps reach it).
  std::unique_ptr<Worker> StartWatchedRound(int64_t step) {
    config.hang_timeout = std::chrono::seconds(5);
    config.monitor_interval = std::chrono::seconds(1);
    StartAgent();
    spawner.own_pgid_next = true;
    StartRound(1);
    return ConnectRank(0, step);
  }

  boost::asio::io_context io;
  launcher::LaunchConfig config;
  std::string tmpdir;
  std::shared_ptr<EventLog> events;  // set before StartAgent to have the records
  std::string watchdog_fifo;         // served when not empty
  FakeClock clock;
  FakeSpawner spawner{io};
  std::shared_ptr<FakeCoordinator::Log> log = std::make_shared<FakeCoordinator::Log>();
  FakePlanner* planner = nullptr;  // owned by the agent
  std::function<int(int)> signal_exit_code;
  std::unique_ptr<launcher::Agent> agent;
};

}  // namespace ftrun::testing
