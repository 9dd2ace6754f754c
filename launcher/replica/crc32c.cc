#include "launcher/replica/crc32c.h"

#include <array>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ftrun::launcher {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

// The raw state after `p` (no inversion), from `s`.
uint32_t PortableState(uint32_t s, const unsigned char* p, size_t n) {
  for (; n > 0; --n) s = kTable[(s ^ *p++) & 0xff] ^ (s >> 8);
  return s;
}

#if defined(__x86_64__)
// One instruction has a latency of 3 cycles and a throughput of 1: three lanes of kLane bytes
// each run side by side, and their states are joined by shifting one over the next lane's
// length (the CRC is linear: state(s, A B) = shift(state(s, A), |B|) ^ state(0, B)).
constexpr size_t kLane = size_t{32} << 10;

// The state after p[0, n) from s; with kCopy, each 8 bytes loaded are also stored at the same
// offset of q (one pass for a copy and its checksum).
template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t SerialState(uint32_t s, unsigned char* q,
                                                       const unsigned char* p, size_t n) {
  uint64_t c = s;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    if constexpr (kCopy) {
      std::memcpy(q, &v, 8);
      q += 8;
    }
  }
  for (; n > 0; --n) {
    if constexpr (kCopy) *q++ = *p;
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  }
  return static_cast<uint32_t>(c);
}

// shift(x) = the state after kLane zero bytes from state x, a linear map: the xor of its
// values at x's bits, tabled a byte of x at a time.
struct LaneShift {
  uint32_t table[4][256];
  uint32_t operator()(uint32_t x) const {
    return table[0][x & 0xff] ^ table[1][(x >> 8) & 0xff] ^ table[2][(x >> 16) & 0xff] ^
           table[3][x >> 24];
  }
};

const LaneShift& Shift() {
  static const LaneShift shift = [] {
    const std::vector<unsigned char> zeros(kLane);
    uint32_t bit[32];
    for (int i = 0; i < 32; ++i)
      bit[i] = SerialState<false>(uint32_t{1} << i, nullptr, zeros.data(), kLane);
    LaneShift s{};
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if ((b >> j) & 1) v ^= bit[8 * k + j];
        }
        s.table[k][b] = v;
      }
    }
    return s;
  }();
  return shift;
}

template <bool kCopy>
__attribute__((target("sse4.2"))) uint32_t HardwareState(uint32_t s, unsigned char* q,
                                                         const unsigned char* p, size_t n) {
  if (n >= 3 * kLane) {
    const LaneShift& shift = Shift();
    for (; n >= 3 * kLane; n -= 3 * kLane, p += 3 * kLane) {
      uint64_t a = s, b = 0, c = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t x, y, z;
        std::memcpy(&x, p + i, 8);
        std::memcpy(&y, p + kLane + i, 8);
        std::memcpy(&z, p + 2 * kLane + i, 8);
        a = _mm_crc32_u64(a, x);
        b = _mm_crc32_u64(b, y);
        c = _mm_crc32_u64(c, z);
        if constexpr (kCopy) {
          std::memcpy(q + i, &x, 8);
          std::memcpy(q + kLane + i, &y, 8);
          std::memcpy(q + 2 * kLane + i, &z, 8);
        }
      }
      if constexpr (kCopy) q += 3 * kLane;
      s = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(c);
    }
  }
  return SerialState<kCopy>(s, q, p, n);
}

bool Hardware() {
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  return sse42;
}
#endif

}  // namespace

uint32_t Crc32cPortable(std::span<const std::byte> data, uint32_t crc) {
  return ~PortableState(~crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

uint32_t Crc32c(std::span<const std::byte> data, uint32_t crc) {
#if defined(__x86_64__)
  if (Hardware()) {
    return ~HardwareState<false>(~crc, nullptr, reinterpret_cast<const unsigned char*>(data.data()),
                                 data.size());
  }
#endif
  return Crc32cPortable(data, crc);
}

uint32_t CopyCrc32c(std::span<std::byte> to, std::span<const std::byte> from, uint32_t crc) {
#if defined(__x86_64__)
  if (Hardware()) {
    return ~HardwareState<true>(~crc, reinterpret_cast<unsigned char*>(to.data()),
                                reinterpret_cast<const unsigned char*>(from.data()), from.size());
  }
#endif
  if (!from.empty()) std::memcpy(to.data(), from.data(), from.size());
  return Crc32cPortable(to.first(from.size()), crc);
}

}  // namespace ftrun::launcher
