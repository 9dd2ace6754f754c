#include "launcher/replica/replica_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>
#include <malloc.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>

#include "common/log.h"
#include "ftrun/v1/replica.grpc.pb.h"
#include "launcher/checkpoint/checkpoint_io.h"
#include "launcher/checkpoint/snapshot_store.h"
#include "launcher/replica/crc32c.h"
#include "launcher/replica/replica_data_port.h"
#include "launcher/replica/replica_wire.h"

namespace ftrun::launcher {
namespace {

constexpr int kMaxThreads = 8;
constexpr size_t kMaxName = 256;
constexpr size_t kMaxLink = 4096;  // PATH_MAX

bool ValidGroup(const std::string& g) {
  const size_t digits = kShardGroupPrefix.size();
  if (g.size() <= digits || g.size() > kMaxName || !IsShardGroup(g)) return false;
  for (size_t i = digits; i < g.size(); ++i) {
    if (g[i] < '0' || g[i] > '9') return false;
  }
  return true;
}

// A shard's file name as its rank gave it (empty from a sender before the field).
bool ValidFileName(const std::string& n) {
  return n.empty() || (n.size() <= kMaxName && checkpoint_io::PlainFileName(n));
}

bool ValidLink(const std::string& l) {
  return l.empty() || (l.size() <= kMaxLink && checkpoint_io::AbsoluteWithoutControls(l));
}

// What was decided about a copy's header: the buffer to write it into, or the refusal.
struct Admission {
  std::optional<ReplicaWrite> write;
  grpc::Status refusal;
};

}  // namespace

// Replica.Push with raw messages (replica_wire.h), so the bytes go from gRPC's receive
// buffers straight into the replica's memfd: what the generated service would register, with
// ByteBuffer in place of ReplicaChunk.
class ReplicaServer::Service final : public grpc::Service {
 public:
  explicit Service(ReplicaServer* owner) : owner_(owner) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        ReplicaPushMethod(), grpc::internal::RpcMethod::CLIENT_STREAMING,
        new grpc::internal::ClientStreamingHandler<Service, grpc::ByteBuffer, v1::ReplicaAck>(
            [](Service* s, grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
               v1::ReplicaAck* ack) { return s->Push(ctx, reader, ack); },
            this)));
    // Typed: the generated stub's name and messages (the sender calls it through the stub).
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/ftrun.v1.Replica/Reserve", grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<Service, v1::ReplicaHeader, v1::ReplicaReservation>(
            [](Service* s, grpc::ServerContext* ctx, const v1::ReplicaHeader* header,
               v1::ReplicaReservation* out) { return s->Reserve(ctx, header, out); },
            this)));
  }

  grpc::Status Push(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                    v1::ReplicaAck* ack) {
    // Declared first, so it runs after every receive buffer of the copy was freed.
    const struct GiveBackHeap {
      ~GiveBackHeap() { malloc_trim(0); }
    } give_back;
    const auto start = std::chrono::steady_clock::now();
    const std::string peer = rendezvous::Printable(ctx->peer(), 64);
    grpc::ByteBuffer message;
    if (!reader->Read(&message)) {
      if (ctx->IsCancelled()) {
        // The sender gave the copy up before its first message (a newer step superseded it):
        // ordinary business, not a refusal.
        LauncherLog()->debug("replica copy from {} cancelled by its sender before it began", peer);
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the sender");
      }
      return Refused(peer, grpc::StatusCode::INVALID_ARGUMENT, "a copy starts with its header");
    }
    auto fields = ParseReplicaChunk(message);
    if (!fields) return Refused(peer, grpc::StatusCode::INVALID_ARGUMENT, fields.error().message);
    if (!fields->header) {
      return Refused(peer, grpc::StatusCode::INVALID_ARGUMENT, "a copy starts with its header");
    }
    auto admitted = Admit(ctx, peer, *fields->header);
    if (!admitted.write) return admitted.refusal;
    ReplicaWrite write = *admitted.write;
    write.PopulateIfFresh();
    auto failed = [&](grpc::StatusCode code, const std::string& why) {
      const uint64_t id = write.id;
      write.buffer.reset();  // so the group's next copy may have this buffer at once
      Post([o = owner_, id] { o->store_.Abort(id); });
      return Refused(peer, code, write.group + " step " + std::to_string(write.step) + ": " + why);
    };
    size_t offset = 0;
    uint32_t crc = 0;
    // Where the receiving thread's time goes (its debug line): copying and checksumming (one
    // pass), and waiting for the next message.
    std::chrono::steady_clock::duration copying{};
    // Copies one message's bytes into the memfd; the error, if any.
    auto take = [&](const ReplicaChunkFields& f) -> std::optional<std::string> {
      if (f.data_bytes > write.bytes - offset) return "too many bytes";
      const auto t0 = std::chrono::steady_clock::now();
      auto copied = CopyReplicaChunkData(message, write.data().subspan(offset, f.data_bytes), crc);
      if (!copied) return copied.error().message;
      copying += std::chrono::steady_clock::now() - t0;
      crc = *copied;
      offset += f.data_bytes;
      return std::nullopt;
    };
    if (auto bad = take(*fields)) return failed(grpc::StatusCode::INVALID_ARGUMENT, *bad);
    bool last = fields->last;
    uint32_t sent = fields->crc32c;
    while (!last) {
      if (owner_->stopping_) return failed(grpc::StatusCode::UNAVAILABLE, "the agent is stopping");
      if (!reader->Read(&message)) {
        return failed(grpc::StatusCode::CANCELLED, "the sender went away after " +
                                                       std::to_string(offset) + " of " +
                                                       std::to_string(write.bytes) + " bytes");
      }
      fields = ParseReplicaChunk(message);
      if (!fields) return failed(grpc::StatusCode::INVALID_ARGUMENT, fields.error().message);
      if (auto bad = take(*fields)) return failed(grpc::StatusCode::INVALID_ARGUMENT, *bad);
      last = fields->last;
      sent = fields->crc32c;
    }
    if (offset != write.bytes) {
      return failed(grpc::StatusCode::INVALID_ARGUMENT,
                    std::to_string(offset) + " of " + std::to_string(write.bytes) + " bytes");
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    LauncherLog()->debug(
        "replica of {} step={}: {} bytes received in {:.3f}s (copying and checksumming {:.3f}s)",
        write.group, write.step, write.bytes, seconds,
        std::chrono::duration<double>(copying).count());
    auto finished = Finish(write, sent, crc, seconds, [ctx] { return ctx->IsCancelled(); });
    if (!finished) return failed(grpc::StatusCode::UNAVAILABLE, "the agent is stopping");
    if (!*finished)
      return Refused(peer, grpc::StatusCode::INVALID_ARGUMENT, finished->error().message);
    ack->set_step(write.step);
    return grpc::Status::OK;
  }

  // Replica.Reserve: the header admitted as Push admits its first message; the copy's bytes
  // then come on the data port (ReplicaDataPort) with the ticket answered here.
  grpc::Status Reserve(grpc::ServerContext* ctx, const v1::ReplicaHeader* header,
                       v1::ReplicaReservation* out) {
    if (!owner_->data_) {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no direct path here: use Push");
    }
    const std::string peer = rendezvous::Printable(ctx->peer(), 64);
    auto admitted = Admit(ctx, peer, *header);
    if (!admitted.write) return admitted.refusal;
    auto ticket = owner_->data_->Expect(std::move(*admitted.write), peer);
    if (!ticket) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent is stopping");
    out->set_ticket(*ticket);
    out->set_port(owner_->data_->port());
    return grpc::Status::OK;
  }

  // A copy that arrived whole, on the loop: the store's verdict (nullopt when the loop does not
  // answer before `cancelled` or the server stops).
  template <class Cancelled>
  std::optional<Status> Finish(const ReplicaWrite& write, uint32_t sent, uint32_t received,
                               double seconds, Cancelled cancelled) {
    return OnLoop(cancelled,
                  [o = owner_, id = write.id, sent, received, seconds, group = write.group] {
                    Status s = o->store_.Finish(id, sent, received);
                    if (s && o->stored_) {
                      auto views = o->store_.Complete(group);
                      if (!views.empty()) o->stored_(views.front(), seconds);
                    }
                    return s;
                  });
  }

  // Runs `f` on the loop unless the server is gone by then (its handlers may outlive a call
  // that gave up waiting).
  template <class F>
  void Post(F f) {
    boost::asio::post(owner_->io_, [alive = owner_->alive_, f = std::move(f)]() mutable {
      if (*alive) f();
    });
  }

 private:
  static grpc::Status Refused(const std::string& peer, grpc::StatusCode code,
                              const std::string& why) {
    LauncherLog()->warn("replica copy from {} refused: {}", peer, why);
    return grpc::Status(code, why);
  }

  // A copy's header checked, then the key and the store's Begin on the loop: the write, or the
  // refusal to answer (UNAVAILABLE when the loop does not answer before the call is cancelled
  // or the server stops; then the loop aborts what it began).
  Admission Admit(grpc::ServerContext* ctx, const std::string& peer,
                  const v1::ReplicaHeader& header) {
    if (!ValidGroup(header.group()) || header.bytes() == 0 || header.from().size() > kMaxName ||
        header.key().size() > rendezvous::kMaxSecretBytes || !ValidFileName(header.name()) ||
        !ValidLink(header.part_link())) {
      return Admission{
          .write = std::nullopt,
          .refusal = Refused(peer, grpc::StatusCode::INVALID_ARGUMENT,
                             "bad header (group " + rendezvous::Printable(header.group(), 40) +
                                 ", file name " + rendezvous::Printable(header.name(), 40) + ")")};
    }
    auto state = std::make_shared<Admission>();
    auto answer = OnLoop(
        [ctx] { return ctx->IsCancelled(); },
        [o = owner_, header, state] {
          if (o->key_.empty() || !rendezvous::SecretsEqual(o->key_, header.key())) {
            state->refusal = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong replica key");
            return true;
          }
          // A direct copy of the group admitted but never sent (its sender could not connect
          // and fell back to Push, or died) gives way to this newer one.
          if (o->data_) {
            for (uint64_t id : o->data_->Revoke(header.group())) o->store_.Abort(id);
          }
          auto w = o->store_.Begin(header.group(), header.step(), header.bytes(), header.from(),
                                   header.name(), header.part_link());
          if (w) {
            state->write = std::move(*w);
          } else {
            state->refusal = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, w.error().message);
          }
          return true;
        });
    if (!answer) {
      Post([o = owner_, state] {
        if (state->write) o->store_.Abort(state->write->id);
      });
      return Admission{
          .write = std::nullopt,
          .refusal = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent is stopping")};
    }
    if (!state->write) {
      Refused(peer, state->refusal.error_code(), state->refusal.error_message());
    }
    return std::move(*state);
  }

  // f() on the loop, waited for; nullopt when `cancelled()` or the server stops first.
  template <class Cancelled, class F>
  auto OnLoop(Cancelled cancelled, F f) -> std::optional<decltype(f())> {
    using R = decltype(f());
    auto promise = std::make_shared<std::promise<R>>();
    auto future = promise->get_future();
    Post([promise, f = std::move(f)]() mutable { promise->set_value(f()); });
    while (future.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (cancelled() || owner_->stopping_) return std::nullopt;
    }
    try {
      return future.get();
    } catch (const std::future_error&) {  // the loop dropped the handler unrun
      return std::nullopt;
    }
  }

  ReplicaServer* owner_;
};

ReplicaServer::ReplicaServer(boost::asio::io_context& io, ReplicaStore& store, Options options)
    : io_(io),
      store_(store),
      opts_(std::move(options)),
      service_(std::make_unique<Service>(this)) {}

ReplicaServer::~ReplicaServer() {
  Shutdown();
  *alive_ = false;
}

Result<int> ReplicaServer::Start(const std::string& listen_host) {
  // gRPC reads a copy into slices it mallocs, a few MiB each (kReplicaFrameBytes). With glibc's
  // defaults the memory they are freed into goes back to the kernel (the trim threshold follows
  // the slice size), and the next read faults it in again a page at a time: a gigabyte of page
  // faults and page clears per copy, about a sixth of the receiving node's CPU for it. Kept in
  // the heap while copies run instead, and handed back as each copy ends (Push, malloc_trim),
  // so between copies the agent holds what it held before.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  auto creds = rendezvous::MakeServerCredentials(opts_.tls);
  if (!creds) return creds.error();
  const bool v6 = listen_host.find(':') != std::string::npos;
  const std::string addr = (v6 ? "[" + listen_host + "]" : listen_host) + ":0";
  grpc::ServerBuilder builder;
  builder.AddListeningPort(addr, *creds, &port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxReplicaMessageBytes));
  // A copy is one long stream of megabyte messages: big HTTP/2 frames and socket reads, and a
  // window that never makes the sender wait (gRPC's defaults, 16 KiB frames and 64 KiB
  // windows grown by probing, cost a third of a 1 GiB copy's time on loopback).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kReplicaFrameBytes);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kReplicaWindowBytes);
  builder.AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, kReplicaFrameBytes);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, kReplicaFrameBytes);
  grpc::ResourceQuota quota("ftrun-replica");
  quota.SetMaxThreads(kMaxThreads);
  builder.SetResourceQuota(quota);
  builder.RegisterService(service_.get());
  if (!opts_.tls.enabled() && opts_.direct) {
    // Made before the server, which may call Reserve as soon as it starts.
    data_ = std::make_unique<ReplicaDataPort>(
        ReplicaDataPort::Hooks{
            .finish =
                [this](const ReplicaWrite& write, uint32_t sent, uint32_t received,
                       double seconds) {
                  auto s = service_->Finish(write, sent, received, seconds, [] { return false; });
                  if (s) return *s;
                  service_->Post([this, id = write.id] { store_.Abort(id); });
                  return Status{Error{"the agent is stopping"}};
                },
            .abort = [this](uint64_t id) { service_->Post([this, id] { store_.Abort(id); }); }},
        ReplicaDataPort::Options{.ticket_ttl = opts_.ticket_ttl});
    if (auto data_port = data_->Listen(listen_host); !data_port) {
      // Copies still work, streamed over the replica port.
      LauncherLog()->warn("replica copies will stream over gRPC: {}", data_port.error().message);
      data_.reset();
    }
  }
  server_ = builder.BuildAndStart();
  if (!server_ || port_ <= 0) {
    server_.reset();
    data_.reset();
    return Error{"the flash-checkpoint replica service cannot listen on " + addr};
  }
  LauncherLog()->info("replica service listening addr={}:{} tls={} data_port={}", listen_host,
                      port_, opts_.tls.enabled() ? "on" : "off", data_ ? data_->port() : 0);
  return port_;
}

void ReplicaServer::Shutdown() {
  if (!server_ || stopping_.exchange(true)) return;
  // Receiving threads notice stopping_ within 100 ms; in-flight reads are cancelled.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  // After the server: no Reserve hands out a ticket any more.
  if (data_) data_->Shutdown();
}

uint64_t ReplicaServer::direct_copies() const { return data_ ? data_->received() : 0; }
int ReplicaServer::data_port() const { return data_ ? data_->port() : 0; }
size_t ReplicaServer::open_reservations() const { return data_ ? data_->outstanding() : 0; }

}  // namespace ftrun::launcher
