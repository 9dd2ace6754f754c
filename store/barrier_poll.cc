#include "store/barrier_poll.h"

namespace ftrun::store {

bool IsBarrierKey(std::string_view key) {
  constexpr std::string_view kName = "/store_based_barrier_key:";
  const size_t at = key.rfind(kName);
  if (at == std::string_view::npos || at + kName.size() == key.size()) return false;
  for (char ch : key.substr(at + kName.size())) {
    if (ch < '0' || ch > '9') return false;
  }
  return true;
}

std::optional<int64_t> BarrierCount(const KvStore& kv, const std::string& key) {
  const std::string* v = kv.Get(key);
  if (!v || v->empty() || v->size() > 18) return std::nullopt;  // 18 digits cannot overflow
  int64_t n = 0;
  for (char ch : *v) {
    if (ch < '0' || ch > '9') return std::nullopt;
    n = n * 10 + (ch - '0');
  }
  return n;
}

bool ShouldHoldBarrierPoll(const KvStore& kv, const Request& r, int64_t world_size) {
  if (r.type != Query::kAdd || r.delta != 0 || world_size <= 0 || r.keys.empty() ||
      !IsBarrierKey(r.keys[0])) {
    return false;
  }
  auto count = BarrierCount(kv, r.keys[0]);
  return count && *count < world_size;
}

bool BarrierComplete(const KvStore& kv, const std::string& key, int64_t world_size) {
  auto count = BarrierCount(kv, key);
  return count && *count >= world_size;
}

}  // namespace ftrun::store
