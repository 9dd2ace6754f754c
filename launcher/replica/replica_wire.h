// ReplicaWire: a ReplicaChunk (replica.proto) on the wire without copying its bytes: the
// sender's data field points into the snapshot's mapping, and the receiver copies it from
// gRPC's receive buffers straight into the replica's memfd. A gigabyte copied through the
// generated message classes was copied three more times (into the message, into gRPC's
// buffer; out of it into the message, into the memfd).
//
// The encoding is protobuf's (protobuf writes and reads every tag, length and field; only the
// data field's bytes bypass the message object), so a typed ReplicaChunk client or server
// interoperates. Parsing is bounded: it walks one received message (at most
// kMaxReplicaMessageBytes, gRPC's receive limit) with protobuf's CodedInputStream; lengths
// beyond the message, wrong wire types, a second data field or a malformed header are errors.
//
// Thread: any; no shared state. Errors: Result/Status naming the field.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/result.h"
#include "ftrun/v1/replica.pb.h"

namespace ftrun::launcher {

constexpr size_t kMaxReplicaChunkBytes = size_t{8} << 20;
constexpr size_t kMaxReplicaMessageBytes = kMaxReplicaChunkBytes + 4096;
// The receiver's HTTP/2 frame and socket read size, and its stream window (ReplicaServer).
constexpr int kReplicaFrameBytes = 4 << 20;
constexpr int kReplicaWindowBytes = 64 << 20;

// "/ftrun.v1.Replica/Push", from the generated descriptors.
const char* ReplicaPushMethod();

// `fields` (header, last, crc32c; its data is ignored) followed by `data` as the data field.
// The buffer refers to `data` without copying it: it must stay mapped until the call that
// sends the buffer has finished.
grpc::ByteBuffer EncodeReplicaChunk(const v1::ReplicaChunk& fields,
                                    std::span<const std::byte> data);

// What one received message holds besides its bytes.
struct ReplicaChunkFields {
  std::optional<v1::ReplicaHeader> header;
  bool last = false;
  uint32_t crc32c = 0;
  size_t data_bytes = 0;
};
Result<ReplicaChunkFields> ParseReplicaChunk(grpc::ByteBuffer& message);
// Copies the data field of `message` (already parsed: out.size() == its data_bytes) into out;
// the CRC-32C of those bytes continuing from `crc` (crc32c.h), computed in the same pass.
// The direct path's trailer (replica.proto, Reserve): a CRC-32C as 4 bytes, little-endian.
std::array<std::byte, 4> EncodeCrcTrailer(uint32_t crc);
uint32_t DecodeCrcTrailer(std::span<const std::byte, 4> trailer);

Result<uint32_t> CopyReplicaChunkData(grpc::ByteBuffer& message, std::span<std::byte> out,
                                      uint32_t crc = 0);

}  // namespace ftrun::launcher
