// Crc32c: the CRC-32C (Castagnoli) checksum of the replica channel's copies (replica.proto):
// the sender's of the bytes it read, the receiver's of the bytes it wrote. CRC-32C rather
// than zlib's crc32 (the snapshot files' checksum) because x86-64 computes it in hardware
// (SSE4.2): about 11 GB/s here against zlib's 2 GB/s, which was the largest cost of a copy.
//
// Thread: any (the hardware check and the lane tables are built once, thread-safely).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ftrun::launcher {

// The CRC-32C of `data`, continuing from `crc` (the checksum of the bytes before it; 0 to
// start): Crc32c(b, Crc32c(a)) == Crc32c(a followed by b).
uint32_t Crc32c(std::span<const std::byte> data, uint32_t crc = 0);

// Copies `from` into `to` (to.size() == from.size(), not overlapping) and returns the CRC-32C of
// the bytes, continuing from `crc`, in one pass: each byte is read once, checksummed from the
// register it was loaded into and stored. A copy followed by Crc32c of its destination read a
// received gigabyte twice (the replica receiver's two largest costs).
uint32_t CopyCrc32c(std::span<std::byte> to, std::span<const std::byte> from, uint32_t crc = 0);

// The same, one byte at a time from a table: what a CPU without SSE4.2 runs, and the
// reference the tests compare the hardware path with.
uint32_t Crc32cPortable(std::span<const std::byte> data, uint32_t crc = 0);

}  // namespace ftrun::launcher
