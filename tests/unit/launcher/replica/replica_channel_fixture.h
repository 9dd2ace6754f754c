// The fixture of the replica channel's tests: two agents' replica services on loopback, real
// gRPC and sockets, one real loop thread; and a raw client of the stream (Push), which is what
// a stranger or a broken sender can send.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <optional>
#include <thread>

#include "ftrun/v1/replica.grpc.pb.h"
#include "launcher/replica/crc32c.h"
#include "launcher/replica/replica_service.h"
#include "tests/support/test_support.h"
#include "tests/unit/launcher/checkpoint/snapshot_test_util.h"

namespace ftrun::launcher::replica_testing {

using namespace std::chrono_literals;
using ftrun::launcher::testing::Pattern;
using ftrun::launcher::testing::Save;
using ftrun::testing::WaitFor;

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline const char* kKey = "0123456789abcdef0123456789abcdef";

class ReplicaChannelTest : public ::testing::Test {
 protected:
  template <class F>
  auto OnLoop(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }

  ReplicaChannelTest() : work_(io_.get_executor()), loop_([this] { io_.run(); }) {}
  ~ReplicaChannelTest() override {
    OnLoop([this] {
      a_.reset();
      b_.reset();
      return true;
    });
    work_.reset();
    loop_.join();
  }

  // `direct`: whether it offers and takes the direct path (default: direct_); `ticket_ttl`:
  // how long its tickets are valid.
  std::unique_ptr<ReplicaService> Service(const std::string& host, uint64_t budget = 64 * kMiB,
                                          std::optional<bool> direct = std::nullopt,
                                          std::chrono::milliseconds ticket_ttl = 10s) {
    return OnLoop([&] {
      ReplicaService::Options o;
      o.direct = direct.value_or(direct_);
      o.ticket_ttl = ticket_ttl;
      o.budget_bytes = budget;
      o.copies = 2;
      o.host = host;
      auto s = std::make_unique<ReplicaService>(io_, o);
      auto port = s->Listen("127.0.0.1");
      EXPECT_TRUE(port) << (port ? "" : port.error().message);
      s->OnCopied([this](const std::string&, const std::string& group, uint64_t step,
                         const Status& outcome, double) {
        std::lock_guard lock(mu_);
        copies_.push_back(group + "@" + std::to_string(step) + (outcome ? " ok" : " failed"));
      });
      return s;
    });
  }

  // Nodes a (group rank 0) and b (1) in one round.
  void Round(ReplicaService& a, ReplicaService& b, const std::string& key = kKey) {
    OnLoop([&] {
      rendezvous::NodeAssignment r;
      r.round = 1;
      r.group_world_size = 2;
      r.replica_key = key;
      r.replica_peers = {"127.0.0.1:" + std::to_string(a.server().port()),
                         "127.0.0.1:" + std::to_string(b.server().port())};
      r.group_rank = 0;
      a.RoundStarted(r);
      r.group_rank = 1;
      b.RoundStarted(r);
      return true;
    });
  }

  // A committed snapshot of shard `group` at `step` on this node.
  SnapshotView Snapshot(uint64_t step, const std::string& content,
                        const std::string& group = "rank-0") {
    Save(snapshots_, 0, step, content);
    auto view = *snapshots_.Newest(0);
    view.meta.group = group;
    return view;
  }

  std::optional<ReplicaView> Newest(ReplicaService& s, const std::string& group) {
    return OnLoop([&]() -> std::optional<ReplicaView> {
      auto views = s.store().Complete(group);
      if (views.empty()) return std::nullopt;
      return views.front();
    });
  }

  // The bytes of the group's newest replica ("" : none).
  std::string NewestBytes(ReplicaService& s, const std::string& group) {
    auto v = Newest(s, group);
    return v ? std::string(reinterpret_cast<const char*>(v->data().data()), v->bytes) : "";
  }

  bool WaitForStep(ReplicaService& s, const std::string& group, uint64_t step) {
    return WaitFor(
        [&] {
          auto v = Newest(s, group);
          return v && v->step == step;
        },
        20s);
  }

  std::vector<std::string> Copies() {
    std::lock_guard lock(mu_);
    return copies_;
  }

  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread loop_;
  SnapshotStore snapshots_{1, 600 * kMiB};
  std::unique_ptr<ReplicaService> a_, b_;
  bool direct_ = true;  // the services' path unless a test names one
  std::mutex mu_;
  std::vector<std::string> copies_;
};

// A raw client: what a stranger (or a broken sender) can send.
inline grpc::Status RawPush(int port, const std::string& key, const std::string& data, bool finish,
                            uint64_t bytes = 0, std::optional<uint32_t> crc = std::nullopt,
                            const std::string& name = "", const std::string& part_link = "") {
  auto stub = v1::Replica::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::ReplicaAck ack;
  auto writer = stub->Push(&ctx, &ack);
  v1::ReplicaChunk chunk;
  chunk.mutable_header()->set_key(key);
  chunk.mutable_header()->set_group("rank-0");
  chunk.mutable_header()->set_step(99);
  chunk.mutable_header()->set_bytes(bytes ? bytes : data.size());
  chunk.mutable_header()->set_name(name);
  chunk.mutable_header()->set_part_link(part_link);
  chunk.set_data(data);
  chunk.set_last(finish);
  chunk.set_crc32c(crc.value_or(Crc32c(ftrun::launcher::testing::AsBytes(data))));
  writer->Write(chunk);
  if (!finish) {
    ctx.TryCancel();  // the sender is gone mid-copy
    return writer->Finish();
  }
  writer->WritesDone();
  return writer->Finish();
}

}  // namespace ftrun::launcher::replica_testing
