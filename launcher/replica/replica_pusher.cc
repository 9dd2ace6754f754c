#include "launcher/replica/replica_pusher.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "ftrun/v1/replica.grpc.pb.h"
#include "launcher/replica/crc32c.h"
#include "launcher/replica/replica_wire.h"

namespace ftrun::launcher {

ReplicaPusher::ReplicaPusher(boost::asio::io_context& io, Options options, Copied copied)
    : io_(io), opts_(std::move(options)), copied_(std::move(copied)), thread_([this] { Run(); }) {}

ReplicaPusher::~ReplicaPusher() {
  *alive_ = false;  // outcomes already posted are dropped
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    pending_.clear();
    // An exiting agent does not wait for a slow peer's deadline.
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  wake_.notify_all();
  thread_.join();
}

std::optional<uint32_t> ReplicaPusher::CommitCrc(const Pending& p,
                                                 std::chrono::system_clock::time_point until) {
  while (p.checksum.pending() && std::chrono::system_clock::now() < until) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return std::nullopt;
    }
    p.checksum.Wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
  }
  return p.checksum.value();
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
  }
  const int fd = fcntl(view.fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    LauncherLog()->warn("replicas: {} step={} not copied: dup: {}", view.meta.group, view.step,
                        std::strerror(errno));
    return;
  }
  Pending p{.group = view.meta.group,
            .name = view.meta.target.name,
            .step = view.step,
            .bytes = view.bytes,
            .fd = std::shared_ptr<int>(new int(fd),
                                       [](int* f) {
                                         close(*f);
                                         delete f;
                                       }),
            .generation = view.generation_counter(),
            .expected = view.generation,
            .checksum = view.meta.checksum,
            .offered = std::chrono::steady_clock::now()};
  {
    std::lock_guard lock(mu_);
    pending_[p.group] = std::move(p);
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
    auto mapped = maps_.Map(*next.fd, next.bytes);
    if (!mapped) {
      LauncherLog()->warn("replicas: {} step={} not copied: {}", next.group, next.step,
                          mapped.error().message);
      continue;
    }
    const std::span<const std::byte> data = *mapped;
    for (const auto& target : targets) {
      std::string error;
      Outcome outcome = Push(target, key, next, data, &error);
      if (outcome == Outcome::kSuperseded) {
        LauncherLog()->debug("replicas: {} step={} superseded during its copy to {}", next.group,
                             next.step, target);
        break;
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - next.offered).count();
      Status status = outcome == Outcome::kCopied ? Status{} : Status{Error{error}};
      boost::asio::post(io_, [this, alive = alive_, target, group = next.group, step = next.step,
                              status, seconds] {
        if (*alive && copied_) copied_(target, group, step, status, seconds);
      });
    }
  }
}

ReplicaPusher::Outcome ReplicaPusher::Push(const std::string& target, const std::string& key,
                                           const Pending& p, std::span<const std::byte> data,
                                           std::string* error) {
  grpc::ChannelArguments args;
  if (!opts_.tls_target_name.empty()) args.SetSslTargetNameOverride(opts_.tls_target_name);
  args.SetMaxSendMessageSize(static_cast<int>(opts_.chunk_bytes + 4096));
  // One channel per copy: copies are seconds apart, and a replaced peer gets a fresh one.
  auto channel =
      grpc::CreateCustomChannel(target, rendezvous::MakeChannelCredentials(opts_.tls), args);
  grpc::ClientContext ctx;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(10) +
                        std::chrono::seconds(p.bytes >> 26);
  ctx.set_deadline(deadline);
  struct InFlight {
    ReplicaPusher* self;
    InFlight(ReplicaPusher* s, grpc::ClientContext* c) : self(s) {
      std::lock_guard lock(self->mu_);
      self->in_flight_ = c;
      if (self->stop_) c->TryCancel();
    }
    ~InFlight() {
      std::lock_guard lock(self->mu_);
      self->in_flight_ = nullptr;
    }
  } in_flight(this, &ctx);
  v1::ReplicaAck ack;
  // Raw messages (replica_wire.h): the data is sent from the mapping without a copy.
  const grpc::internal::RpcMethod method(ReplicaPushMethod(),
                                         grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), method, &ctx,
                                                                    &ack));
  v1::ReplicaChunk fields;
  auto* header = fields.mutable_header();
  header->set_key(key);
  header->set_group(p.group);
  header->set_step(p.step);
  header->set_bytes(p.bytes);
  header->set_from(opts_.from);
  header->set_name(p.name);
  size_t offset = 0;
  bool open = true;
  do {
    const size_t n = std::min(opts_.chunk_bytes, data.size() - offset);
    auto piece = data.subspan(offset, n);
    offset += n;
    fields.set_last(offset == data.size());
    if (fields.last()) {
      auto crc = CommitCrc(p, deadline);
      if (!crc) crc = Crc32c(data);  // none computed at the commit: the bytes as sent
      // If no Begin handed the buffer out since the snapshot was offered, no worker wrote into
      // what was sent so far. Otherwise the copy may be torn. (gRPC reads the last bytes after
      // this check: one changed in between makes the receiver's checksum differ from the
      // commit's, and the receiver refuses the copy.)
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (p.generation->load() != p.expected) {
        ctx.TryCancel();
        writer->Finish();
        return Outcome::kSuperseded;
      }
      fields.set_crc32c(*crc);
    }
    open = writer->Write(EncodeReplicaChunk(fields, piece));
    fields.clear_header();
  } while (open && offset < data.size());
  if (open) writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok() && p.generation->load() != p.expected) return Outcome::kSuperseded;
  if (!status.ok()) {
    *error = "copy of " + p.group + " step " + std::to_string(p.step) + " to " + target +
             " failed: " + status.error_message();
    return Outcome::kFailed;
  }
  return Outcome::kCopied;
}

}  // namespace ftrun::launcher
