#include "launcher/replica/replica_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <string>

#include "launcher/replica/crc32c.h"

namespace ftrun::launcher {
namespace {

namespace pb = google::protobuf;
using WireFormat = pb::internal::WireFormatLite;

Error Malformed(const char* field) {
  return Error{std::string("a replica chunk with a malformed ") + field + " field"};
}

// Walks the fields of `message`; at the data field, `on_data(in, length)` consumes its bytes.
template <class OnData>
Result<ReplicaChunkFields> Walk(grpc::ByteBuffer& message, OnData on_data) {
  grpc::ProtoBufferReader reader(&message);
  pb::io::CodedInputStream in(&reader);
  ReplicaChunkFields f;
  bool data_seen = false;
  while (const uint32_t tag = in.ReadTag()) {
    const auto type = WireFormat::GetTagWireType(tag);
    switch (WireFormat::GetTagFieldNumber(tag)) {
      case v1::ReplicaChunk::kHeaderFieldNumber: {
        uint32_t length = 0;
        if (type != WireFormat::WIRETYPE_LENGTH_DELIMITED || !in.ReadVarint32(&length) ||
            length > kMaxReplicaMessageBytes) {
          return Malformed("header");
        }
        const auto limit = in.PushLimit(static_cast<int>(length));
        if (!f.header) f.header.emplace();
        if (!f.header->MergeFromCodedStream(&in) || in.BytesUntilLimit() != 0) {
          return Malformed("header");
        }
        in.PopLimit(limit);
        break;
      }
      case v1::ReplicaChunk::kDataFieldNumber: {
        uint32_t length = 0;
        if (type != WireFormat::WIRETYPE_LENGTH_DELIMITED || !in.ReadVarint32(&length) ||
            length > kMaxReplicaMessageBytes || data_seen || !on_data(in, length)) {
          return Malformed("data");
        }
        data_seen = true;
        f.data_bytes = length;
        break;
      }
      case v1::ReplicaChunk::kLastFieldNumber: {
        uint64_t v = 0;
        if (type != WireFormat::WIRETYPE_VARINT || !in.ReadVarint64(&v)) return Malformed("last");
        f.last = v != 0;
        break;
      }
      case v1::ReplicaChunk::kCrc32CFieldNumber: {
        if (type != WireFormat::WIRETYPE_VARINT || !in.ReadVarint32(&f.crc32c)) {
          return Malformed("crc32c");
        }
        break;
      }
      default:
        if (!WireFormat::SkipField(&in, tag)) return Malformed("unknown");
    }
  }
  // ReadTag's 0 is the end of the message, or a broken tag.
  if (!in.ConsumedEntireMessage()) return Malformed("tag");
  return f;
}

}  // namespace

const char* ReplicaPushMethod() {
  static const std::string name = [] {
    const auto* service = v1::ReplicaChunk::descriptor()->file()->FindServiceByName("Replica");
    return "/" + service->full_name() + "/" + service->FindMethodByName("Push")->name();
  }();
  return name.c_str();
}

grpc::ByteBuffer EncodeReplicaChunk(const v1::ReplicaChunk& fields,
                                    std::span<const std::byte> data) {
  std::string prefix = fields.SerializeAsString();
  {
    pb::io::StringOutputStream stream(&prefix);  // appends
    pb::io::CodedOutputStream out(&stream);
    out.WriteTag(WireFormat::MakeTag(v1::ReplicaChunk::kDataFieldNumber,
                                     WireFormat::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint32(static_cast<uint32_t>(data.size()));
  }
  grpc::Slice slices[2] = {grpc::Slice(prefix),
                           grpc::Slice(data.data(), data.size(), grpc::Slice::STATIC_SLICE)};
  return grpc::ByteBuffer(slices, data.empty() ? 1 : 2);
}

Result<ReplicaChunkFields> ParseReplicaChunk(grpc::ByteBuffer& message) {
  return Walk(message, [](pb::io::CodedInputStream& in, uint32_t length) {
    return in.Skip(static_cast<int>(length));
  });
}

Result<uint32_t> CopyReplicaChunkData(grpc::ByteBuffer& message, std::span<std::byte> out,
                                      uint32_t crc) {
  auto walked = Walk(message, [&](pb::io::CodedInputStream& in, uint32_t length) {
    if (length != out.size()) return false;
    // Slice by slice, straight from gRPC's receive buffers (no staging copy), each checksummed
    // as it is copied.
    for (size_t done = 0; done < length;) {
      const void* piece = nullptr;
      int size = 0;
      if (!in.GetDirectBufferPointer(&piece, &size) || size <= 0) return false;
      const size_t n = std::min(static_cast<size_t>(size), length - done);
      crc = CopyCrc32c(out.subspan(done, n), {static_cast<const std::byte*>(piece), n}, crc);
      if (!in.Skip(static_cast<int>(n))) return false;
      done += n;
    }
    return true;
  });
  if (!walked) return walked.error();
  if (walked->data_bytes != out.size()) return Malformed("data");
  return crc;
}

std::array<std::byte, 4> EncodeCrcTrailer(uint32_t crc) {
  std::array<std::byte, 4> out;
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(crc >> (8 * i));
  return out;
}

uint32_t DecodeCrcTrailer(std::span<const std::byte, 4> trailer) {
  uint32_t crc = 0;
  for (size_t i = trailer.size(); i-- > 0;) crc = crc << 8 | std::to_integer<uint32_t>(trailer[i]);
  return crc;
}

}  // namespace ftrun::launcher
