// Rendezvous load generator: simulates N agents joining one round against a running
// `ftrun master` (or any agent's server), then prints how long until every simulated agent
// saw the round running. Used by scripts/bench.py for the rendezvous scale table.
//
//   rendezvous_loadgen --target 127.0.0.1:29400 --nodes 10000 [--channels 256] [--nproc 8]
//                      [--run-id bench] [--timeout 120]
// Output (one line): nodes=N seconds=S channels=C
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ftrun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/wire.h"

namespace v1 = ftrun::v1;

namespace {

struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> done{0};
  std::atomic<int> failed{0};
  int total = 0;
};

// One simulated agent: Join, then Watch until the round runs.
class Agent {
 public:
  Agent(v1::Rendezvous::Stub* stub, Shared* shared, std::string run_id, std::string node, int nproc)
      : stub_(stub),
        shared_(shared),
        run_id_(std::move(run_id)),
        node_(std::move(node)),
        nproc_(nproc) {}

  void Join() {
    auto call = std::make_shared<Call<v1::JoinRequest, v1::JoinResponse>>();
    Header(call->req.mutable_header());
    auto* n = call->req.mutable_node();
    n->set_host(node_);
    n->set_addr("127.0.0.1");
    n->set_node_rank(-1);
    n->set_nproc_per_node(nproc_);
    n->set_free_port(1);
    call->ctx.set_wait_for_ready(true);
    stub_->async()->Join(&call->ctx, &call->req, &call->resp, [this, call](grpc::Status s) {
      if (!s.ok()) return Fail(s);
      OnView(call->resp.view());
    });
  }

 private:
  template <class Req, class Resp>
  struct Call {
    grpc::ClientContext ctx;
    Req req;
    Resp resp;
  };
  void Header(v1::RequestHeader* h) {
    h->set_protocol_version(ftrun::rendezvous::kProtocolVersion);
    h->set_run_id(run_id_);
    h->set_node_id(node_);
    h->set_node_secret(node_ + ":loadgen-secret");  // its credential, bound by its Join
  }
  void OnView(const v1::NodeView& v) {
    if (v.phase() == v1::PHASE_RUNNING || v.phase() == v1::PHASE_SUCCEEDED) {
      if (++shared_->done + shared_->failed == shared_->total) shared_->cv.notify_all();
      return;
    }
    auto call = std::make_shared<Call<v1::WatchRequest, v1::WatchResponse>>();
    Header(call->req.mutable_header());
    call->req.set_known_version(v.version());
    call->req.set_wait_ms(5000);
    stub_->async()->Watch(&call->ctx, &call->req, &call->resp, [this, call](grpc::Status s) {
      if (!s.ok()) return Fail(s);
      OnView(call->resp.view());
    });
  }
  void Fail(const grpc::Status& s) {
    if (shared_->failed++ == 0) std::cerr << node_ << ": " << s.error_message() << "\n";
    if (shared_->done + shared_->failed == shared_->total) shared_->cv.notify_all();
  }

  v1::Rendezvous::Stub* stub_;
  Shared* shared_;
  std::string run_id_, node_;
  int nproc_;
};

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string target = Arg(argc, argv, "target", "127.0.0.1:29400");
  const int nodes = std::atoi(Arg(argc, argv, "nodes", "100").c_str());
  const int channels =
      std::max(1, std::min(nodes, std::atoi(Arg(argc, argv, "channels", "256").c_str())));
  const int nproc = std::atoi(Arg(argc, argv, "nproc", "8").c_str());
  const std::string run_id = Arg(argc, argv, "run-id", "bench");
  const int timeout = std::atoi(Arg(argc, argv, "timeout", "120").c_str());
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("ftrun.loadgen.channel", c);  // a distinct argument: a distinct connection
    stubs.push_back(v1::Rendezvous::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  Shared shared;
  shared.total = nodes;
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < nodes; ++i) {
    agents.push_back(std::make_unique<Agent>(stubs[i % channels].get(), &shared, run_id,
                                             "loadgen-" + std::to_string(i), nproc));
  }
  auto t0 = std::chrono::steady_clock::now();
  for (auto& a : agents) a->Join();
  std::unique_lock lock(shared.mu);
  bool all = shared.cv.wait_for(lock, std::chrono::seconds(timeout),
                                [&] { return shared.done + shared.failed >= nodes; });
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "nodes=" << nodes << " seconds=" << secs << " channels=" << channels
            << " done=" << shared.done << " failed=" << shared.failed << std::endl;
  std::_Exit(all && shared.failed == 0 ? 0 : 1);  // skip tearing down thousands of calls
}
