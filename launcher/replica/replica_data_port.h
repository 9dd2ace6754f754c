// ReplicaDataPort: the receiving end of a replica copy's direct path (replica.proto, Reserve):
// a plain TCP port on which a sender, holding a ticket the control channel gave it, writes a
// snapshot's bytes, which are read straight into the replica's memfd. On loopback this copies
// each byte once (gRPC's stream copied it three times), which is what lets a gigabyte arrive
// within a second.
//
// Trust: a connection is worth nothing without a ticket, and a ticket is handed out only by
// Reserve, after the job's replica key was checked (copies of a TLS job take Push: their bytes
// never come here). A ticket is 128 random bits, single-use, compared in constant time, and
// expires after Options::ticket_ttl; a newer copy of the same group admitted before it was
// presented revokes it (a sender that could not reach this port streams the copy instead).
// An expired or revoked ticket's copy is aborted (the group's previous replica kept).
// Limits: a connection has 2 s in all to present its ticket; the copy then has until 10 s +
// 1 s per 64 MiB after the connection came (later than the sender's deadline, which began
// before), with no read waiting more than 10 s before the checksum. At most kMaxConnections
// connections wait for a ticket or receive at once: when full, the oldest one without a
// ticket (neither presented nor waiting to be read) is dropped for a newcomer, so idle
// strangers cannot keep a sender out; beyond twice that, newcomers are closed. Refusals are
// logged at warn at most once per 10 s (else at debug), never with what the peer sent.
//
// Thread: Listen/Shutdown on one thread (the loop); Expect/Revoke on any (gRPC's threads, the
// loop); one thread accepts and expires tickets, and each connection gets a thread of its own
// for the bulk receive. The hooks run on those threads: `finish` may block (it waits for the
// loop's verdict), `abort` must not. Ownership: the hooks' targets outlive the port (Shutdown,
// or the destructor, joins every thread). Errors: Listen's Result; copies' fates in the log
// and in the reply to the sender.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "launcher/replica/replica_store.h"

namespace ftrun::launcher {

// The data connection's reply: its status byte (gRPC status codes).
enum class DataPortCode : unsigned char { kStored = 0, kBadCopy = 3, kNoTicket = 7 };

class ReplicaDataPort {
 public:
  static constexpr size_t kMaxConnections = 8;
  static constexpr size_t kTicketBytes = 32;

  struct Hooks {
    // The copy arrived whole: `sent` is the sender's checksum, `received` the one of the bytes
    // written. The store's verdict (an error is sent back to the sender).
    std::function<Status(const ReplicaWrite&, uint32_t sent, uint32_t received, double seconds)>
        finish;
    // The copy will not complete (its ticket expired or was revoked, its sender went away, the
    // port stops).
    std::function<void(uint64_t id)> abort;
  };
  struct Options {
    std::chrono::milliseconds ticket_ttl{10000};
  };

  ReplicaDataPort(Hooks hooks, Options options);
  ~ReplicaDataPort();
  ReplicaDataPort(const ReplicaDataPort&) = delete;
  ReplicaDataPort& operator=(const ReplicaDataPort&) = delete;

  // Listens on an ephemeral port of `host` (an address of this host); the port chosen.
  Result<int> Listen(const std::string& host);
  // A copy admitted on the control channel (`peer` names its sender in the log): the ticket
  // its sender presents on the data connection; nullopt once the port stops (the copy is
  // aborted).
  std::optional<std::string> Expect(ReplicaWrite write, std::string peer);
  // Drops the tickets of `group` not yet presented (a newer copy of it is being admitted): the
  // ids of their copies, which the caller aborts (on the loop, before it begins the newer).
  std::vector<uint64_t> Revoke(const std::string& group);
  // Stops accepting; copies in flight and tickets not yet used are aborted. Idempotent.
  void Shutdown();

  int port() const { return port_; }
  // Copies that arrived whole on this port (tests: the direct path was taken).
  uint64_t received() const { return received_; }
  // Tickets handed out and not yet presented, expired or revoked.
  size_t outstanding() const;

 private:
  struct Connection;
  struct Ticketed {
    ReplicaWrite write;
    std::string peer;
    std::chrono::steady_clock::time_point expires;
  };
  void Accept();
  // Makes room for one more connection; false: none can be made.
  bool Admit(int fd);
  void Receive(int fd, std::string peer);
  // The copy `ticket` admits, taken from the table; the connection `fd` is marked as holding it.
  std::optional<Ticketed> Claim(int fd, const std::string& ticket);
  // Aborts the copies of `dropped` (their tickets already removed), saying why.
  void Drop(std::vector<Ticketed> dropped, const char* why);
  // Aborts the copies whose tickets expired (all of them when `all`).
  void Expire(bool all);
  // Logs a refused connection: at warn at most once per 10 s, else at debug.
  void LogRefusal(const std::string& peer, const std::string& why);
  // Drops `fd` from the open connections, then closes it (never shut down after: its number
  // may be reused).
  void Forget(int fd);

  Hooks hooks_;
  Options opts_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd that wakes the accepting thread to stop
  int port_ = 0;
  std::atomic<uint64_t> received_{0};
  mutable std::mutex mu_;
  bool stopping_ = false;
  std::vector<std::pair<std::string, Ticketed>> tickets_;  // few: one per group at most
  // The open connections' sockets in the order they came, each with whether it may no longer
  // be evicted (it presented a ticket, or was evicted already); Shutdown (and eviction) shuts
  // them down, their threads close them.
  std::vector<std::pair<int, bool>> connections_;
  std::chrono::steady_clock::time_point last_warned_{};
  std::thread acceptor_;  // joins each connection's thread
};

}  // namespace ftrun::launcher
