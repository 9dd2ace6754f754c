// ReplicaPusher: copies this node's newest shard snapshots to other nodes' agents (the
// sending half of flash checkpoint replicas; replica.proto, ftrun-flash-checkpoint(7)).
//
// Offer hands it a committed snapshot; one thread of its own sends it. Without TLS it takes
// the direct path: Reserve on the control channel, then the bytes from the memfd to the
// receiver's data port by sendfile (replica.proto, replica_direct_send.h; one copy of each
// byte on loopback). With TLS, FTRUN_FLASH_REPLICA_DIRECT=0, to a receiver without the
// direct path, or when its data port cannot be reached, it streams it over gRPC, in chunks
// (Options::chunk_bytes, 4 MiB: small enough that the receiver's work overlaps the sending)
// sent straight from the snapshot's mapping (replica_wire.h: no copy of the bytes, and memory
// stays bounded whatever the size), to every current target. The last message carries the
// CRC-32C computed when the snapshot committed (SnapshotMeta::checksum; computed in parallel
// with the sending, so the last message waits for it only if the checksum is slower than the
// copy), not one of the bytes as sent: bytes changed in memory since the commit make the
// receiver refuse the copy rather than keep a corrupt one. A snapshot without a commit checksum
// (none was computed) gets one computed here, from the bytes sent. Newest
// wins: a group holds at most one pending snapshot, and an Offer replaces it, so a slow copy is
// followed by the newest snapshot, never by a queue of old ones. One copy is in flight at a time
// (so at most one per peer). A target that fails (unreachable, refused, gone mid-copy) is logged
// and skipped; the next Offer tries it again. The training process never waits for any of this.
//
// The snapshot's buffer is not pinned (the worker's next saves are never refused because of
// a copy): the pusher reads through its own descriptor and mapping, and before the checksum
// that ends the copy it checks that the buffer was not handed out again meanwhile (its generation,
// SnapshotView); if it was, the copy is given up (the receiver keeps its previous replica)
// and the newer snapshot, already pending, goes next.
//
// Thread: SetTargets/Offer/destructor on the loop; the copy thread reports each outcome by
// posting `Copied` to the loop (not for a superseded copy). Errors: only in Copied's Status
// and the log.
#pragma once

#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "ftrun/v1/replica.grpc.pb.h"
#include "launcher/checkpoint/memfd_mappings.h"
#include "launcher/checkpoint/snapshot_store.h"
#include "rendezvous/credentials.h"

namespace ftrun::launcher {

class ReplicaPusher {
 public:
  struct Options {
    std::string from;  // this host, for the receivers' logs
    rendezvous::TlsConfig tls;
    std::string tls_target_name;  // the name the peers' certificates carry ("" : their address)
    size_t chunk_bytes = size_t{4} << 20;
    bool direct = true;  // try the direct path first (never with TLS)
  };
  // On the loop, after each copy to each target: seconds from Offer to the peer's answer.
  using Copied = std::function<void(const std::string& target, const std::string& group,
                                    uint64_t step, const Status& outcome, double seconds)>;

  ReplicaPusher(boost::asio::io_context& io, Options options, Copied copied);
  ~ReplicaPusher();
  ReplicaPusher(const ReplicaPusher&) = delete;
  ReplicaPusher& operator=(const ReplicaPusher&) = delete;

  // Where copies go from now on ("host:port" each), with the job's replica key.
  void SetTargets(std::vector<std::string> targets, std::string key);
  // Queues `view` (a "rank-<r>" group) as its group's newest; replaces an older pending one.
  void Offer(SnapshotView view);

 private:
  // A snapshot to copy, without pinning its buffer.
  struct Pending {
    std::string group;
    std::string name;       // the file name the shard's rank gave it
    std::string part_link;  // the shard's own link its rank gave it
    uint64_t step = 0;
    size_t bytes = 0;
    std::shared_ptr<int> fd;  // our own descriptor of the memfd (closed with the last copy)
    std::shared_ptr<const std::atomic<uint64_t>> generation;
    uint64_t expected = 0;
    CommitChecksum checksum;
    std::chrono::steady_clock::time_point offered;
  };
  enum class Outcome { kCopied, kFailed, kSuperseded };
  // Marks what the copy thread is blocked in (a call, a data connection), under mu_, so the
  // destructor can cut it short.
  struct InFlight {
    InFlight(ReplicaPusher* self, grpc::ClientContext* ctx);
    ~InFlight();
    ReplicaPusher* self;
  };
  bool WatchDataConnection(int fd);  // the direct path's socket (-1: closed); false: stopping
  void CancelInFlight();             // under mu_
  void Run();
  // The commit checksum of p, waited for (until it settles, the copy's deadline or stop).
  std::optional<uint32_t> CommitCrc(const Pending& p, std::chrono::system_clock::time_point until);
  // The checksum the copy's end carries; nullopt when the buffer was handed out again since
  // the offer (the copy may be torn: it is given up).
  std::optional<uint32_t> LastChecksum(const Pending& p, std::span<const std::byte> data,
                                       std::chrono::system_clock::time_point until);
  // One copy to one target: the direct path (replica.proto, Reserve) unless the job uses TLS
  // or the receiver does not offer it, else the stream (Push).
  Outcome Push(const std::string& target, const std::string& key, const Pending& p,
               std::span<const std::byte> data, std::string* error);

  boost::asio::io_context& io_;
  Options opts_;
  Copied copied_;
  // Shared with the copy thread, under mu_.
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<std::string, Pending> pending_;  // per group: the newest not yet sent
  std::vector<std::string> targets_;
  std::set<std::string> unreachable_;  // targets whose data port was not reached this round
  std::string key_;
  grpc::ClientContext* in_flight_ = nullptr;
  int in_flight_fd_ = -1;  // the direct path's data connection
  // Touched on the loop only (set and checked there): outcomes posted by the copy thread may
  // reach the loop after the pusher is gone.
  std::shared_ptr<bool> alive_ =
      std::make_shared<bool>(true);  // the copy being sent (cancelled on stop)
  // The copy thread's only: its read-only mappings of the snapshot buffers, kept from copy to
  // copy (the store reuses its buffers, so page tables are built once).
  MemfdMappings maps_;
  std::thread thread_;  // last: started once the fields above exist
};

}  // namespace ftrun::launcher
