// ReplicaServer: the agent's end of the replica channel (proto/ftrun/v1/replica.proto) that
// receives other nodes' shard snapshots into the ReplicaStore.
//
// It listens on an ephemeral port of one address (the one this agent reports to the
// rendezvous, never every interface), with the rendezvous' TLS settings. A copy is accepted
// only if its key equals the job's replica key (SetKey; compared in constant time) and the
// store takes it (one copy per group in flight, the memory budget); the bytes are written
// straight into the store's memfd and their CRC-32C computed as they arrive, and the copy
// becomes the group's newest replica only when that checksum equals the sender's. A refused
// or broken copy leaves the group's previous replica intact and is logged in one bounded line.
// Without TLS a copy's bytes take the direct path instead (Reserve admits the header exactly
// as above and answers a ticket for the data port, replica_data_port.h, which reads them
// straight into the memfd); with TLS, or from a sender that does not know Reserve, Push.
// Memory: besides the store's buffers, gRPC's receive buffers of the copies in flight (their
// stream windows); Start makes glibc keep freed ones in the heap (mallopt), and each copy's end
// hands the heap's free memory back (malloc_trim): process-wide settings of the agent.
//
// Thread: Start/SetKey/Shutdown on the loop (Shutdown may also run after the loop stopped).
// gRPC's threads (at most kMaxThreads) receive the bytes; every decision and every use of the
// store is posted to the loop, and a receiving thread waits for the loop's answer (giving up
// when the call is cancelled or the server stops). Ownership: `store` and `io` outlive it.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "launcher/replica/replica_store.h"
#include "rendezvous/credentials.h"

namespace grpc {
class Server;
}
namespace ftrun::launcher {
class ReplicaDataPort;
}

namespace ftrun::launcher {

class ReplicaServer {
 public:
  struct Options {
    rendezvous::TlsConfig tls;
    // Offer the direct path (Reserve and a data port; never with TLS). Off: copies take Push.
    bool direct = true;
    std::chrono::milliseconds ticket_ttl{10000};  // a Reserve's ticket is valid this long
  };
  // Runs on the loop after a copy became the newest replica of its group (logs, tests).
  using Stored = std::function<void(const ReplicaView&, double seconds)>;

  ReplicaServer(boost::asio::io_context& io, ReplicaStore& store, Options options);
  ~ReplicaServer();
  ReplicaServer(const ReplicaServer&) = delete;
  ReplicaServer& operator=(const ReplicaServer&) = delete;

  // Listens on an ephemeral port of `listen_host` (an address of this host, not a wildcard);
  // the port chosen. Errors name the address.
  Result<int> Start(const std::string& listen_host);
  // The key copies must carry ("" : every copy is refused).
  void SetKey(std::string key) { key_ = std::move(key); }
  void OnStored(Stored stored) { stored_ = std::move(stored); }
  // Stops accepting; copies in flight are cancelled (their groups keep the previous replica).
  void Shutdown();

  int port() const { return port_; }
  // The direct path's data port (0: none), and its tickets not yet presented.
  int data_port() const;
  size_t open_reservations() const;
  // Copies stored through the direct path (replica_data_port.h); 0 without it.
  uint64_t direct_copies() const;

 private:
  class Service;
  friend class Service;

  boost::asio::io_context& io_;
  ReplicaStore& store_;
  Options opts_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ReplicaDataPort> data_;  // the direct path's port (null with TLS)
  std::atomic<bool> stopping_{false};
  // Read and cleared on the loop only: work posted by a receiving thread that gave up waiting
  // may reach the loop after the server is gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  int port_ = 0;
  // Touched only on the loop.
  std::string key_;
  Stored stored_;
};

}  // namespace ftrun::launcher
