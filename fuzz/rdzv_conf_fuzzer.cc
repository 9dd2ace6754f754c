// Fuzz target: --rdzv-conf (rendezvous_conf.h). The input is the option's value. For any
// input: no crash, no sanitizer report; an accepted configuration holds only values the
// agent can use (positive finite durations that can be armed as timers, attempts >= 1).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_support.h"
#include "rendezvous/rendezvous_conf.h"

namespace {

using ftrun::rendezvous::Seconds;

void CheckSeconds(const char* key, Seconds s) {
  FTRUN_FUZZ_CHECK(std::isfinite(s.count()) && s.count() > 0,
                   std::string(key) + "=" + std::to_string(s.count()));
  (void)ftrun::fuzz::DeadlineAfter(s);  // RendezvousState's deadlines, asio's timers
}

}  // namespace

FTRUN_FUZZ_INITIALIZE()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return -1;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto pairs = ftrun::rendezvous::SplitRendezvousConf(text);
  auto conf = ftrun::rendezvous::ParseRendezvousConf(text);
  FTRUN_FUZZ_CHECK(pairs.has_value() || !conf.has_value(), "parsed a conf that does not split");
  if (pairs) {
    for (const auto& [k, v] : *pairs) {
      FTRUN_FUZZ_CHECK(!k.empty() && !v.empty(), "an empty key or value");
      (void)ftrun::rendezvous::ParseBool(v);
    }
  }
  if (!conf) {
    FTRUN_FUZZ_CHECK(!conf.error().message.empty(), "an error without a message");
    return 0;
  }
  CheckSeconds("timeout", conf->timeout);
  CheckSeconds("join_timeout", conf->join_timeout);
  CheckSeconds("last_call_timeout", conf->last_call_timeout);
  CheckSeconds("close_timeout", conf->close_timeout);
  CheckSeconds("heartbeat_timeout", conf->heartbeat_timeout);
  CheckSeconds("keep_alive_interval", conf->keep_alive_interval);
  CheckSeconds("read_timeout", conf->read_timeout);
  FTRUN_FUZZ_CHECK(conf->keep_alive_max_attempt >= 1, "keep_alive_max_attempt");
  // A node is lost after interval * attempts (job_setup.cc; only compared, never armed); the
  // watch waits one interval, sent in milliseconds as a uint32 (rendezvous_client.cc).
  FTRUN_FUZZ_CHECK(
      std::isfinite((conf->keep_alive_interval * conf->keep_alive_max_attempt).count()),
      "liveness timeout");
  FTRUN_FUZZ_CHECK(conf->keep_alive_interval.count() * conf->keep_alive_max_attempt <=
                       ftrun::rendezvous::kMaxSeconds,
                   "liveness timeout above the limit");
  volatile uint32_t wait_ms =
      static_cast<uint32_t>(std::clamp(conf->keep_alive_interval.count() * 1000, 0.0, 3.6e6));
  (void)wait_ms;
  if (conf->rank) FTRUN_FUZZ_CHECK(*conf->rank >= 0, "rank");
  return 0;
}
