// A watch flood against a real `ftrun master` (issue 17: 20,000 pending watches used to cost
// the server 334 MB): a member's own watches, forged ones and a crowd of new nodes. What the
// server holds stays bounded; its peak memory is reported.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>

#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "launcher/config/host.h"
#include "rendezvous/wire.h"
#include "tests/integration/rendezvous_job.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;
namespace v1 = ftrun::v1;

// Calls in flight, and a way to wait until all have been answered.
struct Flood {
  struct Watch {
    grpc::ClientContext ctx;
    v1::WatchRequest req;
    v1::WatchResponse resp;
  };
  std::vector<std::unique_ptr<Watch>> calls;
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::map<grpc::StatusCode, int> codes;

  void Send(v1::Rendezvous::Stub& stub, const v1::RequestHeader& h) {
    auto w = std::make_unique<Watch>();
    *w->req.mutable_header() = h;
    w->req.set_known_version(1u << 30);
    w->req.set_wait_ms(10000);
    w->ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    stub.async()->Watch(&w->ctx, &w->req, &w->resp, [this](grpc::Status s) {
      std::lock_guard lock(mu);
      ++codes[s.error_code()];
      ++done;
      cv.notify_all();
    });
    calls.push_back(std::move(w));
  }
  bool WaitAll(std::chrono::seconds timeout) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [&] { return done == calls.size(); });
  }
};

TEST(RendezvousFlood, PendingWatchesAndMemoryStayBounded) {
  TempDir dir;
  const std::string port = std::to_string(TestPort());
  ChildRun master(FtrunBinary(), {"master", "--port", port, "--host", "127.0.0.1", "--nnodes", "2",
                                  "--rdzv-id", "job", "--log-level", "warning"});
  auto stub = v1::Rendezvous::NewStub(
      grpc::CreateChannel("127.0.0.1:" + port, grpc::InsecureChannelCredentials()));
  auto header = [](const std::string& node, const std::string& secret) {
    return OutsiderHeader(node, secret);
  };
  auto join = [&](const std::string& node) {
    v1::JoinRequest r;
    *r.mutable_header() = header(node, node + "-secret-0123456789");
    r.mutable_node()->set_addr("127.0.0.1");
    r.mutable_node()->set_host(node);
    r.mutable_node()->set_nproc_per_node(1);
    r.mutable_node()->set_node_rank(-1);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    ctx.set_wait_for_ready(true);
    v1::JoinResponse resp;
    return stub->Join(&ctx, r, &resp);
  };
  ASSERT_TRUE(join("member").ok());
  const long before_kb = ProcStatusKb(master.pid(), "VmHWM");
  // A crowd of new nodes: past 4 x MAX + 64 = 72 they are refused.
  int refused_joins = 0;
  for (int i = 0; i < 100; ++i) {
    auto s = join("crowd-" + std::to_string(i));
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused_joins;
  }
  EXPECT_EQ(refused_joins, 100 - 71);
  constexpr int kEach = 20000;
  Flood flood;
  for (int i = 0; i < kEach; ++i) {
    flood.Send(*stub, header("member", "member-secret-0123456789"));  // its own watches
    flood.Send(*stub, header("member", "forged-secret-0123456789"));  // in its name
    if (i < 71)
      flood.Send(*stub, header("crowd-" + std::to_string(i),
                               "crowd-" + std::to_string(i) + "-secret-0123456789"));
  }
  ASSERT_TRUE(flood.WaitAll(60s)) << flood.done << " of " << flood.calls.size() << " answered";
  const long after_kb = ProcStatusKb(master.pid(), "VmHWM");
  RecordProperty("master_peak_kb_before", static_cast<int>(before_kb));
  RecordProperty("master_peak_kb_after", static_cast<int>(after_kb));
  std::cerr << "master peak RSS: " << before_kb / 1024 << " MB before the flood, "
            << after_kb / 1024 << " MB after " << flood.calls.size() << " watch calls\n";
  EXPECT_EQ(flood.codes[grpc::StatusCode::PERMISSION_DENIED], kEach) << "the forged ones";
  EXPECT_EQ(flood.codes[grpc::StatusCode::OK], kEach + 71);
  if (kMemoryIsMeasurable) {
    EXPECT_LT(after_kb - before_kb, 100 * 1024) << "20,000 pending watches used to cost 334 MB";
  }
  master.Signal(SIGTERM);
  master.Wait(30s);
}

}  // namespace
}  // namespace ftrun::testing
