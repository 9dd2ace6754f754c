// RemoteCoordinator against a real rendezvous server on 127.0.0.1, each on its own loop: an
// agent slow to apply a view (starting its workers blocks its loop) is not taken for a dead
// one, because it watches again before applying the view.
#include "launcher/coordinator/remote_coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <optional>
#include <thread>

#include "rendezvous/rendezvous_server.h"
#include "tests/unit/launcher/coordinator/recording_listener.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;

// A loop on its own thread, kept running until Stop().
struct Loop {
  boost::asio::io_context io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work{
      io.get_executor()};
  std::thread thread{[this] { io.run(); }};

  // Runs `f` on the loop and returns its result (nullopt after 20 s).
  template <class F>
  auto Call(F f) -> std::optional<decltype(f())> {
    std::promise<decltype(f())> result;
    boost::asio::post(io, [&] { result.set_value(f()); });
    auto future = result.get_future();
    if (future.wait_for(20s) != std::future_status::ready) return std::nullopt;
    return future.get();
  }
  void Stop() {
    work.reset();
    if (thread.joinable()) thread.join();
  }
  ~Loop() { Stop(); }
};

// Starting the first round's workers takes longer than the server's grace for a node that
// does not call again after an answer.
class SlowStart : public testing::Recorder {
 public:
  void OnRoundStarted(const rendezvous::NodeAssignment& a) override {
    Recorder::OnRoundStarted(a);
    if (!slept_.exchange(true)) {
      std::this_thread::sleep_for(rendezvous::RendezvousState::kRewatchGrace + 1s);
    }
    started = true;
  }
  std::atomic<bool> started{false};

 private:
  std::atomic<bool> slept_{false};
};

RemoteCoordinatorOptions Options(int port, const std::string& id) {
  RemoteCoordinatorOptions o;
  o.client.target = "127.0.0.1:" + std::to_string(port);
  o.client.run_id = "job";
  o.client.node_id = id;
  o.client.min_nodes = o.client.max_nodes = 2;
  o.node.node_id = id;
  o.node.host = id;
  o.node.addr = "127.0.0.1";
  o.node.nproc_per_node = 1;
  o.node.node_rank = -1;
  o.node.free_port = 1234;
  o.connect_timeout = rendezvous::Duration(20);
  return o;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

TEST(RemoteCoordinatorTest, AnAgentSlowToStartItsWorkersIsNotTakenForADeadOne) {
  Loop server_loop;
  rendezvous::ServerOptions so;
  so.listen_host = "127.0.0.1";
  so.job.run_id = "job";
  so.job.min_nodes = so.job.max_nodes = 2;
  so.job.fault_save = false;
  so.job.liveness_timeout = 60s;  // only the answered-node rule can lose it in this test
  rendezvous::RendezvousServer server(server_loop.io, so);
  auto port = server.Start();
  ASSERT_TRUE(port) << port.error().message;

  // a joins first and waits in a watch, so that the round reaches it as a watch's answer.
  Loop a_loop, b_loop;
  SlowStart slow;
  testing::Recorder quick;
  RemoteCoordinator a(a_loop.io, Options(*port, "a"));
  RemoteCoordinator b(b_loop.io, Options(*port, "b"));
  a_loop.Call([&] { return (a.Start(&slow), true); });
  ASSERT_TRUE(WaitFor(
      [&] {
        return server_loop.Call([&] { return server.pending_watches(); }) ==
               std::optional<size_t>(1);
      },
      20s));
  b_loop.Call([&] { return (b.Start(&quick), true); });
  ASSERT_TRUE(WaitFor([&] { return slow.started.load(); }, 30s)) << "a's round never started";

  auto phase = server_loop.Call([&] { return server.state().phase(); });
  auto nodes = server_loop.Call([&] { return server.state().node_count(); });
  EXPECT_EQ(phase, std::optional(rendezvous::Phase::kRunning))
      << "the slow agent was lost: "
      << server_loop.Call([&] { return server.state().View("b").reason; }).value_or("?");
  EXPECT_EQ(nodes, std::optional<size_t>(2));
  EXPECT_EQ(slow.calls, std::vector<std::string>{"start 0"});

  a_loop.Call([&] { return (a.Shutdown(), true); });
  b_loop.Call([&] { return (b.Shutdown(), true); });
  a_loop.Stop();
  b_loop.Stop();
  std::promise<void> stopped;
  boost::asio::post(server_loop.io, [&] { server.Shutdown([&] { stopped.set_value(); }); });
  ASSERT_EQ(stopped.get_future().wait_for(10s), std::future_status::ready);
  server_loop.Stop();
}

}  // namespace
}  // namespace ftrun::launcher
