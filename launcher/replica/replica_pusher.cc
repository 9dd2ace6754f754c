#include "launcher/replica/replica_pusher.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
  for (auto& [ino, m] : maps_) munmap(const_cast<std::byte*>(m.data), m.size);
}

const std::byte* ReplicaPusher::Map(const Pending& p) {
  struct stat st {};
  if (fstat(*p.fd, &st) != 0) {
    LauncherLog()->warn("replicas: {} step={} not copied: fstat: {}", p.group, p.step,
                        std::strerror(errno));
    return nullptr;
  }
  auto it = maps_.find(st.st_ino);
  if (it != maps_.end() && it->second.size >= p.bytes) return it->second.data;
  if (it != maps_.end()) {
    munmap(const_cast<std::byte*>(it->second.data), it->second.size);
    maps_.erase(it);
  }
  // MAP_POPULATE: the page tables in one call, not a fault per page; kept for the next copies.
  void* map = mmap(nullptr, p.bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, *p.fd, 0);
  if (map == MAP_FAILED) {
    LauncherLog()->warn("replicas: {} step={} not copied: mmap of {} bytes: {}", p.group, p.step,
                        p.bytes, std::strerror(errno));
    return nullptr;
  }
  auto* data = static_cast<const std::byte*>(map);
  maps_[st.st_ino] = Mapping{data, p.bytes};
  return data;
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
    const std::byte* map = Map(next);
    if (map == nullptr) continue;
    std::span<const std::byte> data(map, next.bytes);
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
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10) +
                   std::chrono::seconds(p.bytes >> 26));
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
  uint32_t crc = 0;
  size_t offset = 0;
  bool open = true;
  do {
    const size_t n = std::min(opts_.chunk_bytes, data.size() - offset);
    auto piece = data.subspan(offset, n);
    crc = Crc32c(piece, crc);
    offset += n;
    fields.set_last(offset == data.size());
    if (fields.last()) {
      // Every byte has been checksummed: if no Begin handed the buffer out since the snapshot
      // was offered, no worker wrote into what we read. Otherwise the copy may be torn. (gRPC
      // reads the bytes it sends after we did: one changed in between makes the receiver's
      // checksum differ from ours, and the receiver refuses the copy.)
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (p.generation->load() != p.expected) {
        ctx.TryCancel();
        writer->Finish();
        return Outcome::kSuperseded;
      }
      fields.set_crc32c(crc);
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
