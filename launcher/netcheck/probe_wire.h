// Internal to the pair probe (pair_probe.cc, pair_probe_client.cc): the message header of
// the wire format documented in pair_probe.h (pure functions), and the chunked transfer of a
// DATA payload that both sides use.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

#include "launcher/netcheck/pair_probe.h"

namespace ftrun::launcher::probe_wire {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Header = std::array<uint8_t, kProbeHeaderSize>;

enum MsgType : uint8_t { kPing = 1, kPong, kData, kDataDone, kPull, kError, kKey };
inline constexpr std::array<uint8_t, 4> kMagic = {'F', 'T', 'N', 'P'};
inline constexpr size_t kMaxPing = 64;
inline constexpr size_t kMaxErrorText = 1024;
inline constexpr size_t kChunk = 1 << 20;

inline Header Encode(uint8_t type, uint64_t length) {
  Header h{};
  std::copy(kMagic.begin(), kMagic.end(), h.begin());
  h[4] = kProbeVersion;
  h[5] = type;
  for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<uint8_t>(length >> (56 - 8 * i));
  return h;
}

inline uint64_t BigEndian64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

inline std::array<uint8_t, 8> ToBigEndian64(uint64_t v) {
  std::array<uint8_t, 8> out{};
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
  return out;
}

struct Decoded {
  uint8_t type = 0;
  uint64_t length = 0;
};

// Checks magic, version and the reserved bytes; the message type is the caller's business.
inline Result<Decoded> Decode(const Header& h) {
  if (!std::equal(kMagic.begin(), kMagic.end(), h.begin())) {
    return Error{fmt::format("bad magic {:02x}{:02x}{:02x}{:02x} (not an ftrun netcheck probe)",
                             h[0], h[1], h[2], h[3])};
  }
  if (h[4] != kProbeVersion) {
    return Error{fmt::format("unsupported probe version {} (this is {})", h[4], kProbeVersion)};
  }
  if (h[6] != 0 || h[7] != 0) return Error{"reserved header bytes are not zero"};
  return Decoded{h[5], BigEndian64(h.data() + 8)};
}

// The first message of a connection, KEY: checks the header and returns the key's length,
// which must lie in [kMinProbeKey, kMaxProbeKey] (so that the server reads a bounded key).
// The errors are fixed texts: nothing the peer sent is quoted (they are logged unauthenticated).
inline Result<size_t> ParseKeyHeader(const Header& h) {
  if (!std::equal(kMagic.begin(), kMagic.end(), h.begin())) {
    return Error{"not an ftrun netcheck probe"};
  }
  if (h[4] != kProbeVersion) return Error{"another probe version"};
  if (h[5] != kKey || h[6] != 0 || h[7] != 0) return Error{"no probe key first"};
  const uint64_t n = BigEndian64(h.data() + 8);
  if (n < kMinProbeKey || n > kMaxProbeKey) return Error{"a probe key of the wrong length"};
  return static_cast<size_t>(n);
}

// MB/s, MB = 1e6 bytes.
inline double Mbps(uint64_t bytes, Clock::duration d) {
  double s = std::chrono::duration<double>(d).count();
  return s > 0 ? static_cast<double>(bytes) / s / 1e6 : 0;
}

enum class Direction { kRead, kWrite };

// Moves `remaining` bytes over `sock` through `buf`, at most buf.size() at a time, counting
// `remaining` down; then done(ec): the first error, or none once `remaining` is 0 (at once
// when it already is). `done` must keep the owner of sock, buf and remaining alive.
template <class Done>
void TransferChunks(Direction dir, tcp::socket& sock, std::vector<uint8_t>& buf,
                    uint64_t& remaining, Done done) {
  if (remaining == 0) return done(boost::system::error_code{});
  const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining, buf.size()));
  auto next = [dir, &sock, &buf, &remaining, done](const boost::system::error_code& ec,
                                                   size_t moved) {
    if (ec) return done(ec);
    remaining -= moved;
    TransferChunks(dir, sock, buf, remaining, done);
  };
  if (dir == Direction::kRead) {
    asio::async_read(sock, asio::buffer(buf.data(), n), std::move(next));
  } else {
    asio::async_write(sock, asio::buffer(buf.data(), n), std::move(next));
  }
}

}  // namespace ftrun::launcher::probe_wire
