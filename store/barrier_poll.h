// torch's store-based barrier (init_process_group, new_group; torch 1.13 to 2.0): every rank
// adds 1 to "<prefix>/store_based_barrier_key:<n>", then polls it with ADD 0 every 10 ms until
// it reads the world size. The agent's store holds such a poll until the last rank arrives
// (store_server.h) instead of answering a count that sends the rank back to sleep; these are
// the pure decisions it takes. Thread: any; no state of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "store/kv_store.h"
#include "store/wire.h"

namespace ftrun::store {

// Whether `key` is a barrier key: ".../store_based_barrier_key:" followed by decimal digits.
bool IsBarrierKey(std::string_view key);

// The barrier's count as the store holds it, when it is a plain non-negative decimal number
// (nullopt: unset, or not a count this code understands — such a poll is never held).
std::optional<int64_t> BarrierCount(const KvStore& kv, const std::string& key);

// Whether request `r` is a barrier poll (ADD 0 of a barrier key) that would read fewer ranks
// than `world_size` (0: unknown, nothing is held).
bool ShouldHoldBarrierPoll(const KvStore& kv, const Request& r, int64_t world_size);

// Whether every one of `world_size` ranks has arrived at barrier `key`.
bool BarrierComplete(const KvStore& kv, const std::string& key, int64_t world_size);

}  // namespace ftrun::store
