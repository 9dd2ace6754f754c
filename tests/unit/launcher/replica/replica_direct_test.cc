// The replica copy's direct path (replica.proto, Reserve; replica_data_port.h) between two
// agents' replica services on loopback: copies take it without TLS, a receiver without it gets
// the stream, and the data port refuses what no admitted header announced: a connection
// without a valid ticket, a ticket used twice, too late or revoked, bytes whose checksum
// differs; idle strangers cannot keep a copy out.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "launcher/replica/replica_data_port.h"
#include "launcher/replica/replica_wire.h"
#include "tests/unit/launcher/replica/replica_channel_fixture.h"

namespace ftrun::launcher::replica_testing {
namespace {

// What the data port answered: its status byte and message.
struct Answer {
  int code = -1;
  std::string message;
};

grpc::Status Reserve(int port, const std::string& key, uint64_t bytes,
                     v1::ReplicaReservation* out) {
  auto stub = v1::Replica::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::ReplicaHeader header;
  header.set_key(key);
  header.set_group("rank-0");
  header.set_step(42);
  header.set_bytes(bytes);
  return stub->Reserve(&ctx, header, out);
}

std::string Trailer(uint32_t crc) {
  const auto t = EncodeCrcTrailer(crc);
  return std::string(reinterpret_cast<const char*>(t.data()), t.size());
}

int Code(DataPortCode c) { return static_cast<int>(c); }

// A connection to `port` on loopback whose reads give up after 10 s.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval ten{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &ten, sizeof ten);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  return fd;
}

// Writes `wire` to the data port on loopback, then reads its answer until it closes
// (nullopt: it closed without one).
std::optional<Answer> SendToDataPort(int port, const std::string& wire) {
  const int fd = ConnectLoopback(port);
  EXPECT_EQ(send(fd, wire.data(), wire.size(), MSG_NOSIGNAL), static_cast<ssize_t>(wire.size()));
  shutdown(fd, SHUT_WR);  // what was not sent will not come
  std::string reply;
  char buf[512];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) reply.append(buf, static_cast<size_t>(n));
  close(fd);
  if (reply.size() < 2) return std::nullopt;
  return Answer{static_cast<unsigned char>(reply[0]), reply.substr(2)};
}

TEST_F(ReplicaChannelTest, WithoutTlsACopyTakesTheDirectPath) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  ASSERT_GT(b_->server().data_port(), 0);
  const std::string content = Pattern(5 * kMiB + 7, 'd');
  auto view = Snapshot(3, content);
  OnLoop([&] {
    a_->Committed(view);
    return true;
  });
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 3));
  auto replica = *Newest(*b_, "rank-0");
  ASSERT_EQ(replica.bytes, content.size());
  EXPECT_EQ(std::memcmp(replica.data().data(), content.data(), content.size()), 0);
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 10s));
  EXPECT_EQ(Copies().front(), "rank-0@3 ok");
  // (Counted after the receiving thread had the loop's verdict, which may be just after.)
  EXPECT_TRUE(WaitFor([&] { return b_->server().direct_copies() == 1; }, 10s));
}

TEST_F(ReplicaChannelTest, AReceiverWithoutTheDirectPathGetsTheStream) {
  a_ = Service("node-a");
  b_ = Service("node-b", 64 * kMiB, /*direct=*/false);
  Round(*a_, *b_);
  EXPECT_EQ(b_->server().data_port(), 0);
  auto view = Snapshot(8, Pattern(3 * kMiB, 's'));
  OnLoop([&] {
    a_->Committed(view);
    return true;
  });
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 8));
  EXPECT_EQ(b_->server().direct_copies(), 0u);
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 10s));
  EXPECT_EQ(Copies().front(), "rank-0@8 ok");
}

TEST_F(ReplicaChannelTest, TheDataPortRefusesAConnectionWithoutAnAdmittedTicket) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int data_port = b_->server().data_port();
  // A forged ticket, then one too short: nothing is stored, and no reservation is needed for a
  // refusal (the key is checked only by Reserve, over the control channel).
  auto forged = SendToDataPort(data_port, std::string(32, 'f') + "evil" + Trailer(0));
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->code, Code(DataPortCode::kNoTicket));
  EXPECT_NE(forged->message.find("ticket"), std::string::npos) << forged->message;
  auto short_ticket = SendToDataPort(data_port, "short");
  ASSERT_TRUE(short_ticket);
  EXPECT_EQ(short_ticket->code, Code(DataPortCode::kNoTicket));
  // Reserve itself checks the key as Push does.
  v1::ReplicaReservation reservation;
  EXPECT_EQ(Reserve(b_->server().port(), "forged-key-forged-key-forged-key", 4, &reservation)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(Newest(*b_, "rank-0"));
  // A ticket is good for one connection.
  ASSERT_TRUE(Reserve(b_->server().port(), kKey, 4, &reservation).ok());
  const std::string good = "good";
  auto stored = SendToDataPort(
      data_port, reservation.ticket() + good + Trailer(Crc32c(testing::AsBytes(good))));
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->code, Code(DataPortCode::kStored)) << stored->message;
  EXPECT_EQ(Newest(*b_, "rank-0")->step, 42u);
  auto again = SendToDataPort(
      data_port, reservation.ticket() + good + Trailer(Crc32c(testing::AsBytes(good))));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->code, Code(DataPortCode::kNoTicket));
}

TEST_F(ReplicaChannelTest, DirectBytesWhoseChecksumDiffersOrThatStopShortLeaveThePreviousReplica) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int port = b_->server().port();
  const int data_port = b_->server().data_port();
  ASSERT_TRUE(RawPush(port, kKey, "complete", true).ok());
  v1::ReplicaReservation reservation;
  ASSERT_TRUE(Reserve(port, kKey, 8, &reservation).ok());
  const std::string other = "altered!";
  auto refused = SendToDataPort(
      data_port, reservation.ticket() + other + Trailer(Crc32c(testing::AsBytes(other)) ^ 1));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, Code(DataPortCode::kBadCopy));
  EXPECT_NE(refused->message.find("checksum"), std::string::npos) << refused->message;
  // A sender that stops before the checksum (how it gives up a superseded copy), then one that
  // stops mid-bytes: no answer, nothing kept, and the group is free for the next copy.
  ASSERT_TRUE(Reserve(port, kKey, 8, &reservation).ok());
  EXPECT_FALSE(SendToDataPort(data_port, reservation.ticket() + other));
  ASSERT_TRUE(WaitFor([&] { return Reserve(port, kKey, 8, &reservation).ok(); }, 10s));
  EXPECT_FALSE(SendToDataPort(data_port, reservation.ticket() + "alt"));
  EXPECT_EQ(NewestBytes(*b_, "rank-0"), "complete");
  ASSERT_TRUE(WaitFor([&] { return RawPush(port, kKey, "again", true).ok(); }, 10s));
}

TEST_F(ReplicaChannelTest, AReservationWhoseBytesNeverComeExpires) {
  b_ = Service("node-b", 64 * kMiB, /*direct=*/true, /*ticket_ttl=*/1s);
  a_ = Service("node-a");
  Round(*a_, *b_);
  v1::ReplicaReservation reservation;
  ASSERT_TRUE(Reserve(b_->server().port(), kKey, 4 * kMiB, &reservation).ok());
  // Its ticket expires unused (and its copy is aborted).
  EXPECT_EQ(b_->server().open_reservations(), 1u);
  ASSERT_TRUE(WaitFor([&] { return b_->server().open_reservations() == 0; }, 10s));
  auto late = SendToDataPort(b_->server().data_port(), reservation.ticket() + "late");
  ASSERT_TRUE(late);
  EXPECT_EQ(late->code, Code(DataPortCode::kNoTicket));
  EXPECT_FALSE(Newest(*b_, "rank-0"));
}

TEST_F(ReplicaChannelTest, ANewerCopyOfTheGroupRevokesAReservationNeverSent) {
  b_ = Service("node-b");
  a_ = Service("node-a");
  Round(*a_, *b_);
  const int port = b_->server().port();
  v1::ReplicaReservation first;
  ASSERT_TRUE(Reserve(port, kKey, 4, &first).ok());
  // Its sender could not reach the data port and streams the copy instead: admitted at once,
  // not refused as "a copy of the group already arriving" until the ticket expires.
  ASSERT_TRUE(RawPush(port, kKey, "streamed", true).ok());
  EXPECT_EQ(NewestBytes(*b_, "rank-0"), "streamed");
  auto late = SendToDataPort(b_->server().data_port(), first.ticket() + "lost" + Trailer(0));
  ASSERT_TRUE(late);
  EXPECT_EQ(late->code, Code(DataPortCode::kNoTicket));
}

TEST_F(ReplicaChannelTest, IdleConnectionsToTheDataPortDoNotKeepACopyOut) {
  a_ = Service("node-a");
  b_ = Service("node-b");
  Round(*a_, *b_);
  // Strangers hold every connection slot without ever sending a ticket.
  std::vector<int> idle;
  for (size_t i = 0; i < ReplicaDataPort::kMaxConnections; ++i) {
    idle.push_back(ConnectLoopback(b_->server().data_port()));
  }
  auto view = Snapshot(5, Pattern(2 * kMiB, 'i'));
  OnLoop([&] {
    a_->Committed(view);
    return true;
  });
  // The copy makes room for itself (the oldest connection without a ticket is dropped) well
  // before the strangers' 2 s to present a ticket would have freed a slot.
  ASSERT_TRUE(WaitForStep(*b_, "rank-0", 5));
  ASSERT_TRUE(WaitFor([&] { return !Copies().empty(); }, 10s));
  EXPECT_EQ(Copies().front(), "rank-0@5 ok");
  EXPECT_EQ(b_->server().direct_copies(), 1u);
  for (int fd : idle) close(fd);
}

TEST(ReplicaDirectOption, FtrunFlashReplicaDirectIsZeroOrOne) {
  boost::asio::io_context io;
  LaunchConfig config;
  config.max_nodes = 2;
  config.flash_replicas = 2;
  auto made = MakeReplicaService(io, config, {{"FTRUN_FLASH_REPLICA_DIRECT", "yes"}}, "node");
  ASSERT_FALSE(made);
  EXPECT_NE(made.error().message.find("FTRUN_FLASH_REPLICA_DIRECT"), std::string::npos)
      << made.error().message;
  for (const char* value : {"0", "1"}) {
    auto ok = MakeReplicaService(io, config, {{"FTRUN_FLASH_REPLICA_DIRECT", value}}, "node");
    EXPECT_TRUE(ok && *ok) << value;
  }
}

}  // namespace
}  // namespace ftrun::launcher::replica_testing
