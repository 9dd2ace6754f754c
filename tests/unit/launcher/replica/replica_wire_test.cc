// The replica channel's checksum (CRC-32C) and its raw ReplicaChunk encoding: the bytes go
// by reference on the sending side and straight into the caller's memory on the receiving
// side, and bad messages are errors.
#include "launcher/replica/replica_wire.h"

#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "launcher/replica/crc32c.h"

namespace ftrun::launcher {
namespace {

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

std::string Random(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen());
  return s;
}

grpc::ByteBuffer Buffer(const std::string& wire) {
  grpc::Slice slice(wire);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(Crc32cTest, IsTheCastagnoliChecksum) {
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);  // the standard check value
  EXPECT_EQ(Crc32cPortable(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c({}), 0u);
}

TEST(Crc32cTest, TheHardwarePathAgreesAcrossLanesAndPieces) {
  const std::string data = Random(400'000, 7);
  // Around the three-lane block (3 x 32 KiB) and odd starts.
  for (size_t n : {size_t{1}, size_t{7}, size_t{98'303}, size_t{98'304}, size_t{98'305},
                   size_t{196'613}, size_t{399'990}}) {
    for (size_t start : {size_t{0}, size_t{3}}) {
      auto piece = Bytes(data).subspan(start, n);
      const uint32_t whole = Crc32cPortable(piece);
      EXPECT_EQ(Crc32c(piece), whole) << n << "@" << start;
      const size_t cut = n / 3;
      EXPECT_EQ(Crc32c(piece.subspan(cut), Crc32c(piece.first(cut))), whole) << n;
    }
  }
}

TEST(Crc32cTest, ACopyIsExactAndItsChecksumIsTheChecksumOfTheBytes) {
  const std::string data = Random(400'000, 9);
  for (size_t n : {size_t{0}, size_t{5}, size_t{98'303}, size_t{98'304}, size_t{98'311},
                   size_t{294'913}, size_t{399'990}}) {
    for (size_t start : {size_t{0}, size_t{5}}) {
      auto piece = Bytes(data).subspan(start, n);
      // Guard bytes either side: nothing is written outside the destination.
      std::string out(n + 2, '#');
      auto to = std::as_writable_bytes(std::span(out)).subspan(1, n);
      EXPECT_EQ(CopyCrc32c(to, piece), Crc32cPortable(piece)) << n << "@" << start;
      EXPECT_EQ(out.substr(1, n), data.substr(start, n)) << n << "@" << start;
      EXPECT_EQ(out.front(), '#');
      EXPECT_EQ(out.back(), '#');
      // Continued from the checksum of the bytes before it.
      const uint32_t before = Crc32c(Bytes("prefix"));
      EXPECT_EQ(CopyCrc32c(to, piece, before), Crc32cPortable(piece, before)) << n;
    }
  }
}

TEST(ReplicaWireTest, AChunkReadsBackAndAliasesItsBytes) {
  const std::string data = Random(3 << 20, 1);
  v1::ReplicaChunk fields;
  fields.mutable_header()->set_group("rank-3");
  fields.mutable_header()->set_bytes(data.size());
  fields.set_last(true);
  fields.set_crc32c(Crc32c(Bytes(data)));
  grpc::ByteBuffer message = EncodeReplicaChunk(fields, Bytes(data));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(message.Dump(&slices).ok());
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(static_cast<const void*>(slices[1].begin()), static_cast<const void*>(data.data()))
      << "the data was copied";

  auto parsed = ParseReplicaChunk(message);
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_TRUE(parsed->header);
  EXPECT_EQ(parsed->header->group(), "rank-3");
  EXPECT_TRUE(parsed->last);
  EXPECT_EQ(parsed->crc32c, Crc32c(Bytes(data)));
  ASSERT_EQ(parsed->data_bytes, data.size());
  std::string out(data.size(), '\0');
  auto copied = CopyReplicaChunkData(message, std::as_writable_bytes(std::span(out)));
  ASSERT_TRUE(copied) << copied.error().message;
  EXPECT_EQ(out, data);
  EXPECT_EQ(*copied, Crc32c(Bytes(data)));
  // A typed client reads it too: it is protobuf's ReplicaChunk.
  v1::ReplicaChunk typed;
  ASSERT_TRUE(typed.ParseFromString(Flatten(message)));
  EXPECT_EQ(typed.data(), data);
  EXPECT_EQ(typed.crc32c(), fields.crc32c());
}

TEST(ReplicaWireTest, ATypedSendersChunkIsRead) {
  v1::ReplicaChunk typed;
  typed.set_data("middle bytes");
  typed.set_last(false);
  grpc::ByteBuffer message = Buffer(typed.SerializeAsString());
  auto parsed = ParseReplicaChunk(message);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_FALSE(parsed->header);
  EXPECT_FALSE(parsed->last);
  ASSERT_EQ(parsed->data_bytes, 12u);
  std::string out(12, '\0');
  ASSERT_TRUE(CopyReplicaChunkData(message, std::as_writable_bytes(std::span(out))));
  EXPECT_EQ(out, "middle bytes");
  // The caller's room must be the data's size: no write past it.
  std::string small(4, '\0');
  EXPECT_FALSE(CopyReplicaChunkData(message, std::as_writable_bytes(std::span(small))));
}

// As gRPC hands a received message over: in slices cut anywhere, the data field's included.
TEST(ReplicaWireTest, DataSpreadOverManySlicesIsCopiedAndChecksummedWhole) {
  const std::string data = Random(1'000'003, 4);
  v1::ReplicaChunk typed;
  typed.set_data(data);
  typed.set_last(true);
  const std::string wire = typed.SerializeAsString();
  std::vector<grpc::Slice> slices;
  for (size_t at = 0, n = 1; at < wire.size(); at += n, n = n * 3 + 1) {
    slices.emplace_back(wire.data() + at, std::min(n, wire.size() - at));
  }
  ASSERT_GT(slices.size(), 5u);
  grpc::ByteBuffer message(slices.data(), slices.size());
  auto parsed = ParseReplicaChunk(message);
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_EQ(parsed->data_bytes, data.size());
  std::string out(data.size(), '\0');
  const uint32_t before = Crc32c(Bytes("the bytes of earlier messages"));
  auto copied = CopyReplicaChunkData(message, std::as_writable_bytes(std::span(out)), before);
  ASSERT_TRUE(copied) << copied.error().message;
  EXPECT_EQ(out, data);
  EXPECT_EQ(*copied, Crc32c(Bytes(data), before));
}

TEST(ReplicaWireTest, BadMessagesAreErrors) {
  v1::ReplicaChunk typed;
  typed.set_data("abc");
  const std::string good = typed.SerializeAsString();  // 0x12 0x03 'a' 'b' 'c'
  std::vector<std::string> bad = {
      good.substr(0, 4),                           // the data cut short
      std::string("\x12\xff\xff\xff\xff\x0f", 6),  // a length of 4 GiB
      good + good,                                 // two data fields
      std::string("\x10\x01", 2),                  // data as a varint
      std::string("\x1a\x01x", 3),                 // last as bytes
      std::string("\x0a\x02\xff\xff", 4),          // a header that is no ReplicaHeader
      std::string("\x00", 1),                      // tag 0
      std::string("\x2a\x05", 2),                  // crc32c as bytes, cut short
  };
  for (const auto& wire : bad) {
    grpc::ByteBuffer message = Buffer(wire);
    EXPECT_FALSE(ParseReplicaChunk(message)) << testing::PrintToString(wire);
  }
  // An unknown field (the old zlib checksum, 4) is skipped, not an error.
  grpc::ByteBuffer old = Buffer(good + std::string("\x20\x07", 2));
  auto parsed = ParseReplicaChunk(old);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->crc32c, 0u);
}

}  // namespace
}  // namespace ftrun::launcher
