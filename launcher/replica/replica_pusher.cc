#include "launcher/replica/replica_pusher.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/endpoint.h"
#include "common/log.h"
#include "ftrun/v1/replica.grpc.pb.h"
#include "launcher/replica/crc32c.h"
#include "launcher/replica/replica_data_port.h"
#include "launcher/replica/replica_direct_send.h"
#include "launcher/replica/replica_wire.h"

namespace ftrun::launcher {
ReplicaPusher::InFlight::InFlight(ReplicaPusher* s, grpc::ClientContext* ctx) : self(s) {
  std::lock_guard lock(self->mu_);
  self->in_flight_ = ctx;
  if (self->stop_) self->CancelInFlight();
}

ReplicaPusher::InFlight::~InFlight() {
  std::lock_guard lock(self->mu_);
  self->in_flight_ = nullptr;
}

bool ReplicaPusher::WatchDataConnection(int fd) {
  std::lock_guard lock(mu_);
  in_flight_fd_ = fd;
  return !stop_;
}

void ReplicaPusher::CancelInFlight() {
  if (in_flight_ != nullptr) in_flight_->TryCancel();
  if (in_flight_fd_ >= 0) shutdown(in_flight_fd_, SHUT_RDWR);
}

ReplicaPusher::ReplicaPusher(boost::asio::io_context& io, Options options, Copied copied)
    : io_(io), opts_(std::move(options)), copied_(std::move(copied)), thread_([this] { Run(); }) {}

ReplicaPusher::~ReplicaPusher() {
  *alive_ = false;  // outcomes already posted are dropped
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    pending_.clear();
    // An exiting agent does not wait for a slow peer's deadline.
    CancelInFlight();
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
  unreachable_.clear();
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
            .part_link = view.meta.target.part_link,
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
  // sendfile to a receiver that went away raises SIGPIPE at the sending thread: here it is an
  // error (EPIPE) to report, never a signal.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
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
  // replica.proto: a copy gets 10 s + 1 s per 64 MiB.
  auto copy_deadline = [&] {
    return std::chrono::system_clock::now() + std::chrono::seconds(10) +
           std::chrono::seconds(p.bytes >> 26);
  };
  auto deadline = copy_deadline();
  v1::ReplicaHeader header;
  header.set_key(key);
  header.set_group(p.group);
  header.set_step(p.step);
  header.set_bytes(p.bytes);
  header.set_from(opts_.from);
  header.set_name(p.name);
  header.set_part_link(p.part_link);
  bool direct = !opts_.tls.enabled() && opts_.direct;
  if (direct) {
    std::lock_guard lock(mu_);
    direct = !unreachable_.contains(target);
  }
  if (direct) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    v1::ReplicaReservation reservation;
    grpc::Status reserved;
    {
      InFlight in_flight(this, &ctx);
      reserved = v1::Replica::NewStub(channel)->Reserve(&ctx, header, &reservation);
    }
    const std::string what =
        "copy of " + p.group + " step " + std::to_string(p.step) + " to " + target;
    if (reserved.ok()) {
      auto endpoint = ParseEndpoint(target, -1, "replica target");
      if (!endpoint || reservation.ticket().size() != ReplicaDataPort::kTicketBytes ||
          reservation.port() <= 0 || reservation.port() > 65535) {
        *error = what + " failed: the receiver's reservation is malformed";
        return Outcome::kFailed;
      }
      const DirectResult sent = SendDirect(
          endpoint->host, reservation.port(), reservation.ticket(), *p.fd, p.bytes, deadline,
          [&] { return LastChecksum(p, data, deadline); },
          [this](int fd) { return WatchDataConnection(fd); });
      switch (sent.outcome) {
        case DirectOutcome::kStored:
          return Outcome::kCopied;
        case DirectOutcome::kGivenUp:
          return Outcome::kSuperseded;
        case DirectOutcome::kFailed:
          *error = what + " failed: " + sent.detail;
          return p.generation->load() != p.expected ? Outcome::kSuperseded : Outcome::kFailed;
        case DirectOutcome::kNotConnected:
          // Streamed instead, with a deadline of its own (the receiver revokes the reservation
          // when the stream's header comes), and so are this round's next copies to the
          // target: a network may let only the replica port through.
          LauncherLog()->info(
              "replicas: the data port of {} cannot be reached ({}); copies to "
              "it stream over gRPC this round",
              target, sent.detail);
          {
            std::lock_guard lock(mu_);
            unreachable_.insert(target);
          }
          deadline = copy_deadline();
          break;
      }
    } else if (reserved.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
      *error = what + " failed: " + reserved.error_message();
      return Outcome::kFailed;
    }
    // Otherwise a receiver without the direct path: the stream.
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline);
  InFlight in_flight(this, &ctx);
  v1::ReplicaAck ack;
  // Raw messages (replica_wire.h): the data is sent from the mapping without a copy.
  const grpc::internal::RpcMethod method(ReplicaPushMethod(),
                                         grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), method, &ctx,
                                                                    &ack));
  v1::ReplicaChunk fields;
  *fields.mutable_header() = header;
  size_t offset = 0;
  bool open = true;
  do {
    const size_t n = std::min(opts_.chunk_bytes, data.size() - offset);
    auto piece = data.subspan(offset, n);
    offset += n;
    fields.set_last(offset == data.size());
    if (fields.last()) {
      auto crc = LastChecksum(p, data, deadline);
      if (!crc) {
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

std::optional<uint32_t> ReplicaPusher::LastChecksum(const Pending& p,
                                                    std::span<const std::byte> data,
                                                    std::chrono::system_clock::time_point until) {
  auto crc = CommitCrc(p, until);
  if (!crc) crc = Crc32c(data);  // none computed at the commit: the bytes as sent
  // If no Begin handed the buffer out since the snapshot was offered, no worker wrote into
  // what was sent so far. Otherwise the copy may be torn. (The last bytes may leave after
  // this check: one changed in between makes the receiver's checksum differ from the
  // commit's, and the receiver refuses the copy.)
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (p.generation->load() != p.expected) return std::nullopt;
  return crc;
}

}  // namespace ftrun::launcher
