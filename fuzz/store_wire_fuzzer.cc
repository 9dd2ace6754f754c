// Fuzz target: the agent store's wire format and semantics (store/wire.h, protocol.h,
// kv_store.h), as store_server.cc drives them, without sockets. The input is a sequence of
// chunks "<connection byte> <length byte> <bytes>" arriving on up to 4 connections; each
// connection's bytes are parsed and applied as they accumulate. For any input: no crash, no
// sanitizer report, the store stays within its limits, a refused request closes only its
// connection, and every answer goes to a connection that is open.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "store/kv_store.h"
#include "store/protocol.h"
#include "store/wire.h"

namespace fs = ftrun::store;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ftrun::fuzz::Quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fs::KvLimits l;
  l.max_key_bytes = 32;
  l.max_value_bytes = 256;
  l.max_total_bytes = 2048;
  l.max_keys_per_request = 8;
  l.max_watches_per_conn = 4;
  const size_t max_request = 1 + 3 * 8 + l.max_key_bytes + 2 * l.max_value_bytes;
  fs::KvStore kv(l);
  std::array<std::string, 4> in;
  std::array<bool, 4> open = {true, true, true, true};
  size_t at = 0;
  while (at + 2 <= size) {
    const size_t c = data[at] % in.size();
    const size_t n = std::min<size_t>(data[at + 1], size - at - 2);
    at += 2;
    if (!open[c]) {  // a closed connection is a new one now
      open[c] = true;
      in[c].clear();
    }
    in[c].append(reinterpret_cast<const char*>(data + at), n);
    at += n;
    for (;;) {
      fs::Parsed p = fs::ParseRequest(in[c], l);
      if (p.status == fs::Parsed::kNeedMore) {
        if (in[c].size() > max_request)
          p.status = fs::Parsed::kBad;
        else
          break;
      }
      bool ok = p.status == fs::Parsed::kComplete;
      if (ok) {
        FTRUN_FUZZ_CHECK(p.consumed > 0 && p.consumed <= in[c].size(), "consumed");
        std::vector<fs::Outgoing> out;
        ok = fs::Apply(kv, c, p.request, out).has_value();
        for (const auto& o : out) {
          FTRUN_FUZZ_CHECK(o.conn < open.size() && open[o.conn], "an answer to a closed conn");
        }
        in[c].erase(0, p.consumed);
      } else {
        FTRUN_FUZZ_CHECK(!p.error.empty(), "a refusal without a reason");
      }
      if (!ok) {
        kv.Disconnect(c);
        open[c] = false;
        in[c].clear();
        break;
      }
    }
    FTRUN_FUZZ_CHECK(kv.bytes() <= l.max_total_bytes, "the store passed its byte bound");
  }
  return 0;
}
