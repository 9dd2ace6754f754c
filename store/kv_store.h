// The agent store's key/value core: torch's c10d TCPStore semantics (torch 1.13) without I/O.
// Keys and values are byte strings. A client is a connection id; WAIT and WATCH_KEY register
// that id, and what a later change owes to it (a released wait, a watch notification) is
// queued as an Event for the caller to deliver, in order. Everything is bounded by KvLimits:
// a change that would pass a bound is refused with an Error naming the bound, and nothing
// changes.
//
// Thread: not thread-safe; the owner (StoreServer: the agent's loop) serialises every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/result.h"

namespace ftrun::store {

using ConnId = uint64_t;

struct KvLimits {
  size_t max_key_bytes = 64 * 1024;
  size_t max_value_bytes = 16 * 1024 * 1024;
  size_t max_total_bytes = 256 * 1024 * 1024;  // keys + values held
  size_t max_keys_per_request = 4096;          // WAIT, CHECK
  size_t max_watches_per_conn = 1024;          // WATCH_KEY registrations of one connection
  size_t max_keys = 1 << 20;                   // keys held (each costs more than its bytes)
  // Key bytes named by the pending WAITs and WATCH_KEYs of every connection together.
  size_t max_registered_bytes = 64 * 1024 * 1024;
};

// torch 1.13's WatchResponseType, the values its callback client expects.
enum class WatchEvent : uint8_t { kUpdated = 0, kCreated = 1, kDeleted = 2, kRegistered = 3 };

struct WaitReleased {
  ConnId conn;  // every key its pending WAIT named is now set
};
struct WatchFired {
  ConnId conn;
  WatchEvent event;
  std::string key, old_value, new_value;
};
using Event = std::variant<WaitReleased, WatchFired>;

class KvStore {
 public:
  explicit KvStore(KvLimits limits = {}) : limits_(limits) {}

  Status Set(const std::string& key, std::string value);
  // Sets `desired` when the current value equals `expected`, or when the key is unset and
  // `expected` is empty. Returns the value now held; for an unset key with a non-empty
  // `expected`, returns `expected` (torch 1.13's answer).
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 std::string desired);
  // Adds `delta` to the decimal integer held (0 when unset), stores it in decimal, returns it.
  // Errors: the value is not an integer, or the sum overflows.
  Result<int64_t> Add(const std::string& key, int64_t delta);
  const std::string* Get(const std::string& key) const;  // null when unset
  bool Has(const std::vector<std::string>& keys) const;  // CHECK: all set
  // WAIT: true when every key is set now; otherwise registers `conn` and later queues one
  // WaitReleased. A new Wait of the same connection replaces its pending one (its client
  // gave up on that one: torch's client sends nothing while it waits).
  bool Wait(ConnId conn, const std::vector<std::string>& keys);
  // Error when Wait(conn, keys) would pass max_registered_bytes (then nothing changes).
  Status AdmitWait(ConnId conn, const std::vector<std::string>& keys) const;
  bool Delete(const std::string& key);
  // WATCH_KEY: `conn` is told of every later change of `key` until it disconnects. Error when
  // the connection already holds max_watches_per_conn, or past max_registered_bytes.
  Status Watch(ConnId conn, const std::string& key);
  // Forgets the connection's pending wait and watches.
  void Disconnect(ConnId conn);
  // Removes every key that starts with `prefix` (no notifications: those clients are gone).
  size_t DropPrefix(std::string_view prefix);

  std::vector<Event> TakeEvents();

  size_t size() const { return data_.size(); }
  size_t bytes() const { return bytes_; }
  size_t waiting() const { return awaited_.size(); }
  size_t registered_bytes() const { return registered_bytes_; }
  const KvLimits& limits() const { return limits_; }

 private:
  Status Store(const std::string& key, std::string value);
  void Changed(const std::string& key, WatchEvent event, const std::string& old_value,
               const std::string& new_value);
  void CancelWait(ConnId conn);

  KvLimits limits_;
  std::unordered_map<std::string, std::string> data_;
  size_t bytes_ = 0;
  size_t registered_bytes_ = 0;  // keys named by pending waits and watches
  struct PendingWait {
    size_t remaining = 0;
    std::vector<std::string> keys;  // the unset ones, as registered in waiting_
  };
  std::unordered_map<ConnId, PendingWait> awaited_;
  std::unordered_map<std::string, std::vector<ConnId>> waiting_;
  std::unordered_map<std::string, std::vector<ConnId>> watched_;
  std::unordered_map<ConnId, std::vector<std::string>> watches_of_;
  std::vector<Event> events_;
};

}  // namespace ftrun::store
