#include "store/kv_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace ftrun::store {

namespace {

void Erase(std::vector<ConnId>& v, ConnId conn) {
  v.erase(std::remove(v.begin(), v.end(), conn), v.end());
}

}  // namespace

Status KvStore::Store(const std::string& key, std::string value) {
  if (key.size() > limits_.max_key_bytes) {
    return Error{fmt::format("a key of {} bytes (at most {})", key.size(), limits_.max_key_bytes)};
  }
  if (value.size() > limits_.max_value_bytes) {
    return Error{
        fmt::format("a value of {} bytes (at most {})", value.size(), limits_.max_value_bytes)};
  }
  auto it = data_.find(key);
  if (it == data_.end() && data_.size() >= limits_.max_keys) {
    return Error{
        fmt::format("the store holds {} keys (at most {})", data_.size(), limits_.max_keys)};
  }
  const size_t old_bytes = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t after = bytes_ - old_bytes + key.size() + value.size();
  if (after > limits_.max_total_bytes) {
    return Error{fmt::format("the store is full ({} bytes held, at most {})", bytes_,
                             limits_.max_total_bytes)};
  }
  bytes_ = after;
  if (it == data_.end()) {
    data_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return {};
}

void KvStore::Changed(const std::string& key, WatchEvent event, const std::string& old_value,
                      const std::string& new_value) {
  if (event != WatchEvent::kDeleted) {
    if (auto w = waiting_.find(key); w != waiting_.end()) {
      std::vector<ConnId> conns = std::move(w->second);
      waiting_.erase(w);
      for (ConnId c : conns) {
        auto a = awaited_.find(c);
        if (a == awaited_.end()) continue;
        auto& keys = a->second.keys;
        if (auto k = std::find(keys.begin(), keys.end(), key); k != keys.end()) keys.erase(k);
        if (--a->second.remaining == 0) {
          awaited_.erase(a);
          events_.emplace_back(WaitReleased{c});
        }
      }
    }
  }
  if (auto w = watched_.find(key); w != watched_.end()) {
    for (ConnId c : w->second)
      events_.emplace_back(WatchFired{c, event, key, old_value, new_value});
  }
}

Status KvStore::Set(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const bool existed = it != data_.end();
  std::string old = existed && watched_.count(key) ? it->second : std::string();
  if (auto s = Store(key, std::move(value)); !s) return s;
  Changed(key, existed ? WatchEvent::kUpdated : WatchEvent::kCreated, old, data_.at(key));
  return {};
}

Result<std::string> KvStore::CompareSet(const std::string& key, const std::string& expected,
                                        std::string desired) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return Ok(expected);
    if (auto s = Store(key, std::move(desired)); !s) return s.error();
    Changed(key, WatchEvent::kCreated, "", data_.at(key));
    return Ok(data_.at(key));
  }
  if (it->second != expected) return Ok(it->second);
  std::string old = it->second;
  if (auto s = Store(key, std::move(desired)); !s) return s.error();
  Changed(key, WatchEvent::kUpdated, old, data_.at(key));
  return Ok(data_.at(key));
}

Result<int64_t> KvStore::Add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  std::string old;
  auto it = data_.find(key);
  const bool existed = it != data_.end();
  if (existed) {
    old = it->second;
    const char* b = old.data();
    const char* e = b + old.size();
    while (b != e && (*b == ' ' || *b == '\t' || *b == '\n')) ++b;  // as std::stoll
    if (b != e && *b == '+') ++b;
    auto [p, ec] = std::from_chars(b, e, value);
    if (ec != std::errc() || p == b) {
      return Error{fmt::format("the value held is not an integer ({} bytes)", old.size())};
    }
  }
  if (__builtin_add_overflow(value, delta, &value))
    return Error{"the sum overflows a 64-bit integer"};
  if (auto s = Store(key, std::to_string(value)); !s) return s.error();
  Changed(key, existed ? WatchEvent::kUpdated : WatchEvent::kCreated, old, data_.at(key));
  return value;
}

const std::string* KvStore::Get(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

bool KvStore::Has(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) != 0; });
}

void KvStore::CancelWait(ConnId conn) {
  auto a = awaited_.find(conn);
  if (a == awaited_.end()) return;
  for (const auto& k : a->second.keys) {
    registered_bytes_ -= k.size();
    if (auto w = waiting_.find(k); w != waiting_.end()) {
      Erase(w->second, conn);
      if (w->second.empty()) waiting_.erase(w);
    }
  }
  awaited_.erase(a);
}

bool KvStore::Wait(ConnId conn, const std::vector<std::string>& keys) {
  CancelWait(conn);
  PendingWait p;
  for (const auto& k : keys) {
    if (data_.count(k)) continue;
    // A key named twice is awaited once: it is released by one change.
    if (std::find(p.keys.begin(), p.keys.end(), k) != p.keys.end()) continue;
    p.keys.push_back(k);
    registered_bytes_ += k.size();
    waiting_[k].push_back(conn);
  }
  if (p.keys.empty()) return true;
  p.remaining = p.keys.size();
  awaited_.emplace(conn, std::move(p));
  return false;
}

Status KvStore::AdmitWait(ConnId conn, const std::vector<std::string>& keys) const {
  size_t now = registered_bytes_;
  if (auto a = awaited_.find(conn); a != awaited_.end()) {  // Wait replaces it
    for (const auto& k : a->second.keys) now -= k.size();
  }
  size_t more = 0;
  for (const auto& k : keys) {
    if (!data_.count(k)) more += k.size();  // a key named twice counts twice: a bound
  }
  if (now + more > limits_.max_registered_bytes) {
    return Error{
        fmt::format("{} more bytes of awaited keys ({} held by every WAIT and "
                    "WATCH_KEY, at most {})",
                    more, now, limits_.max_registered_bytes)};
  }
  return {};
}

bool KvStore::Delete(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  std::string old = std::move(it->second);
  bytes_ -= key.size() + old.size();
  data_.erase(it);
  Changed(key, WatchEvent::kDeleted, old, "");
  return true;
}

Status KvStore::Watch(ConnId conn, const std::string& key) {
  auto& mine = watches_of_[conn];
  if (mine.size() >= limits_.max_watches_per_conn) {
    return Error{
        fmt::format("more than {} WATCH_KEY on one connection", limits_.max_watches_per_conn)};
  }
  if (key.size() > limits_.max_key_bytes) {
    return Error{fmt::format("a key of {} bytes (at most {})", key.size(), limits_.max_key_bytes)};
  }
  if (registered_bytes_ + key.size() > limits_.max_registered_bytes) {
    return Error{
        fmt::format("{} more bytes of watched keys ({} held by every WAIT and "
                    "WATCH_KEY, at most {})",
                    key.size(), registered_bytes_, limits_.max_registered_bytes)};
  }
  registered_bytes_ += key.size();
  mine.push_back(key);
  watched_[key].push_back(conn);
  return {};
}

void KvStore::Disconnect(ConnId conn) {
  CancelWait(conn);
  if (auto m = watches_of_.find(conn); m != watches_of_.end()) {
    for (const auto& k : m->second) {
      registered_bytes_ -= k.size();
      if (auto w = watched_.find(k); w != watched_.end()) {
        Erase(w->second, conn);
        if (w->second.empty()) watched_.erase(w);
      }
    }
    watches_of_.erase(m);
  }
}

size_t KvStore::DropPrefix(std::string_view prefix) {
  size_t n = 0;
  for (auto it = data_.begin(); it != data_.end();) {
    if (std::string_view(it->first).starts_with(prefix)) {
      bytes_ -= it->first.size() + it->second.size();
      it = data_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

std::vector<Event> KvStore::TakeEvents() {
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

}  // namespace ftrun::store
