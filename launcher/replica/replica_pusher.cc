#include "launcher/replica/replica_pusher.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "common/log.h"
#include "ftrun/v1/replica.grpc.pb.h"

namespace ftrun::launcher {

ReplicaPusher::ReplicaPusher(boost::asio::io_context& io, Options options, Copied copied)
    : io_(io), opts_(std::move(options)), copied_(std::move(copied)), thread_([this] { Run(); }) {}

ReplicaPusher::~ReplicaPusher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    pending_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void ReplicaPusher::SetTargets(std::vector<std::string> targets, std::string key) {
  std::lock_guard lock(mu_);
  targets_ = std::move(targets);
  key_ = std::move(key);
}

void ReplicaPusher::Offer(SnapshotView view) {
  {
    std::lock_guard lock(mu_);
    if (targets_.empty()) return;
    const std::string group = view.meta.group;
    pending_[group] = Pending{std::move(view), std::chrono::steady_clock::now()};
  }
  wake_.notify_all();
}

void ReplicaPusher::Run() {
  for (;;) {
    Pending next;
    std::vector<std::string> targets;
    std::string key;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      auto it = pending_.begin();
      next = std::move(it->second);
      pending_.erase(it);
      targets = targets_;
      key = key_;
    }
    for (const auto& target : targets) {
      Status outcome = Push(target, key, next.view);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - next.offered).count();
      boost::asio::post(io_, [this, target, group = next.view.meta.group, step = next.view.step,
                              outcome, seconds] {
        if (copied_) copied_(target, group, step, outcome, seconds);
      });
    }
  }
}

Status ReplicaPusher::Push(const std::string& target, const std::string& key,
                           const SnapshotView& view) {
  grpc::ChannelArguments args;
  if (!opts_.tls_target_name.empty()) args.SetSslTargetNameOverride(opts_.tls_target_name);
  args.SetMaxSendMessageSize(static_cast<int>(opts_.chunk_bytes + 4096));
  // One channel per copy: copies are seconds apart, and a replaced peer gets a fresh one.
  auto channel =
      grpc::CreateCustomChannel(target, rendezvous::MakeChannelCredentials(opts_.tls), args);
  auto stub = v1::Replica::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10) +
                   std::chrono::seconds(view.bytes >> 26));
  v1::ReplicaAck ack;
  auto writer = stub->Push(&ctx, &ack);
  v1::ReplicaChunk chunk;
  auto* header = chunk.mutable_header();
  header->set_key(key);
  header->set_group(view.meta.group);
  header->set_step(view.step);
  header->set_bytes(view.bytes);
  header->set_from(opts_.from);
  const auto data = view.data();
  uint32_t crc = 0;
  size_t offset = 0;
  bool open = true;
  do {
    const size_t n = std::min(opts_.chunk_bytes, data.size() - offset);
    auto piece = data.subspan(offset, n);
    crc = SnapshotChecksum(piece, crc);
    chunk.set_data(reinterpret_cast<const char*>(piece.data()), n);
    offset += n;
    chunk.set_last(offset == data.size());
    if (chunk.last()) chunk.set_checksum(crc);
    open = writer->Write(chunk);
    chunk.clear_header();
  } while (open && offset < data.size());
  if (open) writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) {
    return Error{"copy of " + view.meta.group + " step " + std::to_string(view.step) + " to " +
                 target + " failed: " + status.error_message()};
  }
  if (auto matches = ChecksumMatches(view, crc); !matches) return matches;
  return {};
}

}  // namespace ftrun::launcher
