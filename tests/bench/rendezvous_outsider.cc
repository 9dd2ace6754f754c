// An outsider against a running rendezvous (for scripts/chaos.py): someone who can reach the
// port but holds no token and is no member.
//
//   rendezvous_outsider --target HOST:PORT --run-id ID --forge [--round N]
//     Learns the members' node ids from Status (which needs no token when the job has none),
//     then makes every call it can in each member's name, with no secret and with a guessed
//     one: Join (another address), Report (failed, succeeded, stopped, unreachable), Watch,
//     Leave. Output: "forged=N accepted=M" (every accepted call is also named on stderr).
//   rendezvous_outsider --target HOST:PORT --run-id ID --watch-flood N [--channels C]
//     N Watch calls at once (as made-up nodes and in the members' names), all in flight
//     together, then waits for every answer. Output: "watches=N answered=A ok=K seconds=S".
// Exit status 0 when the tool ran (whatever the server answered), 2 on bad arguments.
#include <grpcpp/grpcpp.h>

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
using namespace std::chrono_literals;

namespace {

v1::RequestHeader Header(const std::string& run_id, const std::string& node,
                         const std::string& secret) {
  v1::RequestHeader h;
  h.set_protocol_version(ftrun::rendezvous::kProtocolVersion);
  h.set_run_id(run_id);
  h.set_node_id(node);
  h.set_node_secret(secret);
  return h;
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + 5s);
  return ctx;
}

std::vector<std::string> Members(v1::Rendezvous::Stub& stub, const std::string& run_id) {
  v1::StatusRequest req;
  *req.mutable_header() = Header(run_id, "", "");
  v1::JobStatus st;
  auto s = stub.Status(Ctx().get(), req, &st);
  std::vector<std::string> out;
  if (!s.ok()) {
    std::cerr << "rendezvous_outsider: Status refused: " << s.error_message() << "\n";
    return out;
  }
  for (const auto& n : st.nodes()) out.push_back(n.node_id());
  return out;
}

int Forge(v1::Rendezvous::Stub& stub, const std::string& run_id, uint64_t round) {
  int made = 0, accepted = 0;
  auto count = [&](const grpc::Status& s, const std::string& what, const std::string& node) {
    ++made;
    if (s.ok()) {
      ++accepted;
      std::cerr << "rendezvous_outsider: " << what << " in the name of " << node
                << " was accepted\n";
    }
  };
  for (const auto& node : Members(stub, run_id)) {
    for (const std::string secret : {"", "0123456789abcdef0123456789abcdef"}) {
      v1::JoinRequest join;
      *join.mutable_header() = Header(run_id, node, secret);
      join.mutable_node()->set_addr("10.66.66.66");
      join.mutable_node()->set_host("outsider");
      join.mutable_node()->set_nproc_per_node(1);
      join.mutable_node()->set_node_rank(-1);
      join.mutable_node()->set_free_port(6666);
      v1::JoinResponse join_resp;
      count(stub.Join(Ctx().get(), join, &join_resp), "Join", node);
      for (auto kind : {v1::ReportRequest::KIND_FAILED, v1::ReportRequest::KIND_SUCCEEDED,
                        v1::ReportRequest::KIND_STOPPED, v1::ReportRequest::KIND_UNREACHABLE}) {
        v1::ReportRequest r;
        *r.mutable_header() = Header(run_id, node, secret);
        r.set_round(round);
        r.set_kind(kind);
        r.set_error("forged");
        auto* f = r.add_failures();
        f->set_rank(0);
        f->set_exitcode(1);
        f->set_host("outsider");
        v1::ReportResponse resp;
        count(stub.Report(Ctx().get(), r, &resp), "Report", node);
      }
      v1::WatchRequest w;
      *w.mutable_header() = Header(run_id, node, secret);
      w.set_known_version(1u << 30);
      w.set_wait_ms(100);
      v1::WatchResponse wresp;
      count(stub.Watch(Ctx().get(), w, &wresp), "Watch", node);
      v1::LeaveRequest l;
      *l.mutable_header() = Header(run_id, node, secret);
      v1::LeaveResponse lresp;
      count(stub.Leave(Ctx().get(), l, &lresp), "Leave", node);
    }
  }
  std::cout << "forged=" << made << " accepted=" << accepted << std::endl;
  return 0;
}

struct WatchCall {
  grpc::ClientContext ctx;
  v1::WatchRequest req;
  v1::WatchResponse resp;
};

int WatchFlood(const std::string& target, const std::string& run_id, int n, int channels) {
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", i);  // a connection each
    stubs.push_back(v1::Rendezvous::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  const std::vector<std::string> members = Members(*stubs[0], run_id);
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0, ok = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<WatchCall>> calls;
  for (int i = 0; i < n; ++i) {
    auto c = std::make_shared<WatchCall>();
    const std::string node = (i % 2 == 0 && !members.empty())
                                 ? members[static_cast<size_t>(i / 2) % members.size()]
                                 : "outsider-" + std::to_string(i);
    *c->req.mutable_header() = Header(run_id, node, "");
    c->req.set_known_version(1u << 30);
    c->req.set_wait_ms(10'000);
    c->ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    calls.push_back(c);
    stubs[static_cast<size_t>(i % channels)]->async()->Watch(&c->ctx, &c->req, &c->resp,
                                                             [&, c](grpc::Status s) {
                                                               std::lock_guard lock(mu);
                                                               ++answered;
                                                               ok += s.ok();
                                                               cv.notify_all();
                                                             });
  }
  std::unique_lock lock(mu);
  cv.wait_for(lock, 60s, [&] { return answered == n; });
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "watches=" << n << " answered=" << answered << " ok=" << ok << " seconds=" << secs
            << std::endl;
  if (answered != n) {
    for (auto& c : calls) c->ctx.TryCancel();
    cv.wait_for(lock, 10s, [&] { return answered == n; });
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string target, run_id = "none";
  uint64_t round = 0;
  int flood = 0, channels = 16;
  bool forge = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "rendezvous_outsider: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--target") {
      target = next();
    } else if (a == "--run-id") {
      run_id = next();
    } else if (a == "--round") {
      round = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--forge") {
      forge = true;
    } else if (a == "--watch-flood") {
      flood = std::atoi(next().c_str());
    } else if (a == "--channels") {
      channels = std::max(1, std::atoi(next().c_str()));
    } else {
      std::cerr << "rendezvous_outsider: unknown argument " << a << "\n";
      return 2;
    }
  }
  if (target.empty() || (!forge && flood <= 0)) {
    std::cerr << "usage: rendezvous_outsider --target HOST:PORT [--run-id ID] "
                 "(--forge [--round N] | --watch-flood N [--channels C])\n";
    return 2;
  }
  if (forge) {
    auto stub =
        v1::Rendezvous::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    return Forge(*stub, run_id, round);
  }
  return WatchFlood(target, run_id, flood, channels);
}
