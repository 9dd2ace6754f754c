// ReportQueue against a real rendezvous server on 127.0.0.1 (and against nothing): reports go
// in order, their answers reach the owner, and an unreachable server is retried until the
// owner says it is lost.
#include "launcher/coordinator/report_queue.h"

#include <gtest/gtest.h>

#include <boost/asio/post.hpp>
#include <future>

#include "launcher/config/host.h"
#include "rendezvous/rendezvous_server.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;
using rendezvous::NodeView;
using rendezvous::ReportKind;
using rendezvous::RoundReport;
using rendezvous::RpcOutcome;

rendezvous::ClientOptions Client(int port) {
  rendezvous::ClientOptions o;
  o.target = "127.0.0.1:" + std::to_string(port);
  o.run_id = "job";
  o.node_id = "a";
  o.min_nodes = o.max_nodes = 1;
  o.call_timeout = rendezvous::Duration(2);
  return o;
}

// Runs `f` on the loop and waits for it.
template <class F>
void OnLoop(boost::asio::io_context& io, F f) {
  std::promise<void> done;
  boost::asio::post(io, [&] {
    f();
    done.set_value();
  });
  ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
}

TEST(ReportQueueTest, ReportsGoInOrderAndTheAnswersReachTheOwner) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  rendezvous::ServerOptions so;
  so.listen_host = "127.0.0.1";
  so.job.run_id = "job";
  so.job.min_nodes = so.job.max_nodes = 1;
  so.job.max_restarts = 1;
  so.job.fault_save = false;
  so.job.last_call_timeout = 100ms;
  rendezvous::RendezvousServer server(io, so);
  auto port = server.Start();
  ASSERT_TRUE(port) << port.error().message;
  std::thread loop([&] { io.run(); });

  rendezvous::RendezvousClient client(io, Client(*port));
  std::promise<RpcOutcome> joined;
  rendezvous::NodeInfo node;
  node.host = node.addr = "127.0.0.1";
  node.nproc_per_node = 1;
  node.node_rank = -1;
  node.free_port = 1234;
  OnLoop(io, [&] { client.Join(node, [&](const RpcOutcome& o) { joined.set_value(o); }); });
  auto join = joined.get_future();
  ASSERT_EQ(join.wait_for(10s), std::future_status::ready);
  ASSERT_TRUE(join.get().ok());

  std::vector<NodeView> views;  // touched on the loop only
  std::promise<void> both;
  std::unique_ptr<ReportQueue> queue;
  OnLoop(io, [&] {
    queue = std::make_unique<ReportQueue>(
        io, client,
        ReportQueue::Callbacks{[&](const NodeView& v) {
                                 views.push_back(v);
                                 if (views.size() == 2) {
                                   both.set_value();
                                 }
                               },
                               [](const RpcOutcome&) { return false; }, nullptr});
    auto failed = RoundReport::Of(ReportKind::kFailed, 0);
    rendezvous::WorkerFailure f;
    f.rank = 0;
    f.exitcode = 1;
    failed.failures = {f};
    queue->Push(failed);
    queue->Push(RoundReport::Of(ReportKind::kStopped, 0));
  });
  ASSERT_EQ(both.get_future().wait_for(10s), std::future_status::ready);
  OnLoop(io, [&] {
    EXPECT_EQ(views[0].restart_count, 1);  // the failure spent the one restart
    EXPECT_EQ(views[0].round, 0u);
    EXPECT_EQ(views[1].round, 1u);  // the stop let round 1 form
    queue.reset();
    client.CancelAll();
    server.Shutdown([] {});
  });
  work.reset();
  io.stop();
  loop.join();
}

TEST(ReportQueueTest, AnUnreachableServerIsRetriedUntilTheOwnerCallsItLost) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread loop([&] { io.run(); });
  const auto nothing = PickFreePort();  // nobody listens there
  ASSERT_TRUE(nothing);
  auto options = Client(*nothing);
  options.call_timeout = rendezvous::Duration(0.5);
  rendezvous::RendezvousClient client(io, options);
  int tries = 0;  // loop only
  std::promise<void> gave_up;
  std::unique_ptr<ReportQueue> queue;
  OnLoop(io, [&] {
    queue = std::make_unique<ReportQueue>(
        io, client,
        ReportQueue::Callbacks{[](const NodeView&) { ADD_FAILURE() << "nobody can answer"; },
                               [&](const RpcOutcome& out) {
                                 EXPECT_FALSE(out.ok());
                                 if (++tries < 3) return false;  // retry
                                 gave_up.set_value();
                                 return true;
                               },
                               nullptr});
    queue->Push(RoundReport::Of(ReportKind::kSucceeded, 0));
  });
  ASSERT_EQ(gave_up.get_future().wait_for(20s), std::future_status::ready);
  OnLoop(io, [&] {
    EXPECT_EQ(tries, 3);
    queue.reset();
    client.CancelAll();
  });
  work.reset();
  io.stop();
  loop.join();
}

}  // namespace
}  // namespace ftrun::launcher

namespace ftrun::launcher {
namespace {

TEST(ReportQueueTest, AReportTheServerCannotPlaceYetIsKeptUntilTheNodeHasJoined) {
  // A restarted master does not know the node (NOT_FOUND): the report is kept, the owner is
  // told (it rejoins), and the report counts once the node is back.
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  rendezvous::ServerOptions so;
  so.listen_host = "127.0.0.1";
  so.job.run_id = "job";
  so.job.min_nodes = so.job.max_nodes = 1;
  so.job.fault_save = false;
  rendezvous::RendezvousServer server(io, so);
  auto port = server.Start();
  ASSERT_TRUE(port) << port.error().message;
  std::thread loop([&] { io.run(); });
  rendezvous::RendezvousClient client(io, Client(*port));
  rendezvous::NodeInfo node;
  node.host = node.addr = "127.0.0.1";
  node.nproc_per_node = 1;
  node.free_port = 1234;
  int not_now = 0;  // loop only
  std::promise<NodeView> answered;
  std::unique_ptr<ReportQueue> queue;
  OnLoop(io, [&] {
    queue = std::make_unique<ReportQueue>(
        io, client,
        ReportQueue::Callbacks{[&](const NodeView& v) { answered.set_value(v); },
                               [](const RpcOutcome& out) {
                                 ADD_FAILURE() << "not lost: " << out.message;
                                 return true;
                               },
                               [&](const RpcOutcome& out) {
                                 EXPECT_TRUE(out.unknown_node()) << out.message;
                                 if (++not_now == 1) client.Join(node, [](const RpcOutcome&) {});
                               }});
    queue->Push(RoundReport::Of(ReportKind::kSucceeded, 0));
  });
  auto view = answered.get_future();
  ASSERT_EQ(view.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(view.get().phase, rendezvous::Phase::kSucceeded) << "the kept report counted";
  OnLoop(io, [&] {
    EXPECT_GE(not_now, 1);
    queue.reset();
    client.CancelAll();
    server.Shutdown([] {});
  });
  work.reset();
  io.stop();
  loop.join();
}

}  // namespace
}  // namespace ftrun::launcher
