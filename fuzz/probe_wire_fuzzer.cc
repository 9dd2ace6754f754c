// Fuzz target: the network check's pair probe wire format (netcheck/probe_wire.h,
// pair_probe.h): the input's first 16 bytes go to probe_wire::Decode and ParseKeyHeader, then
// the whole input is what a client sends to a real ProbeServer on 127.0.0.1 (max_bytes 64 KiB,
// so a PULL or DATA stays small; its key is kKey, which the seeds show first; a wrong key is
// refused at a 100 ms handshake deadline). For any input: no crash, no sanitizer report, the server
// closes the connection after the client's EOF (no hang), and what it answers is a sequence of
// well-formed messages of the types a server may send (PONG, DATA, DATA_DONE, ERROR).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "fuzz/fuzz_support.h"
#include "launcher/netcheck/pair_probe.h"
#include "launcher/netcheck/probe_wire.h"

namespace {

namespace pw = ftrun::launcher::probe_wire;

constexpr const char* kKey = "fuzz-probe-key-0123456789abcdef0";  // as fuzz/make_seeds.py

struct Fixture {
  boost::asio::io_context io;
  std::unique_ptr<ftrun::launcher::ProbeServer> server;
};

Fixture& F() {
  static Fixture* f = [] {
    auto* f = new Fixture;
    ftrun::launcher::ProbeServerOptions opts;
    opts.max_bytes = 64 * 1024;
    opts.connection_timeout = std::chrono::seconds(5);
    opts.handshake_timeout = std::chrono::milliseconds(100);
    auto s = ftrun::launcher::ProbeServer::Listen(f->io, "127.0.0.1", 0, opts);
    if (!s) ftrun::fuzz::Fail("cannot start the probe server: " + s.error().message);
    f->server = std::move(*s);
    f->server->SetKey(kKey);
    return f;
  }();
  return *f;
}

void CheckAnswer(const std::string& answer) {
  size_t at = 0;
  while (at < answer.size()) {
    FTRUN_FUZZ_CHECK(answer.size() - at >= ftrun::launcher::kProbeHeaderSize,
                     "a truncated header in the answer");
    pw::Header h;
    std::memcpy(h.data(), answer.data() + at, h.size());
    auto d = pw::Decode(h);
    FTRUN_FUZZ_CHECK(d.has_value(), "the server sent a bad header");
    FTRUN_FUZZ_CHECK(d->type == pw::kPong || d->type == pw::kData || d->type == pw::kDataDone ||
                         d->type == pw::kError,
                     "the server sent message type " + std::to_string(d->type));
    if (d->type == pw::kPong) FTRUN_FUZZ_CHECK(d->length <= pw::kMaxPing, "PONG length");
    if (d->type == pw::kError) FTRUN_FUZZ_CHECK(d->length <= pw::kMaxErrorText, "ERROR length");
    if (d->type == pw::kDataDone) FTRUN_FUZZ_CHECK(d->length == 0, "DATA_DONE length");
    at += h.size();
    // A DATA answer to a PULL may be cut short when the client's EOF ends the connection.
    at += static_cast<size_t>(std::min<uint64_t>(d->length, answer.size() - at));
  }
}

}  // namespace

FTRUN_FUZZ_INITIALIZE(F())

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return -1;
  if (size >= ftrun::launcher::kProbeHeaderSize) {
    pw::Header h;
    std::memcpy(h.data(), data, h.size());
    auto d = pw::Decode(h);
    if (d) {
      FTRUN_FUZZ_CHECK(pw::Encode(d->type, d->length) == h, "Decode and Encode disagree");
    }
    if (auto n = pw::ParseKeyHeader(h)) {
      FTRUN_FUZZ_CHECK(*n >= ftrun::launcher::kMinProbeKey && *n <= ftrun::launcher::kMaxProbeKey,
                       "a key length out of bounds passed");
    }
  }
  Fixture& f = F();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(f.server->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ftrun::fuzz::Fail(std::string("cannot connect to the probe server: ") + std::strerror(errno));
  }
  const std::string answer =
      ftrun::fuzz::Converse(f.io, fd, std::string_view(reinterpret_cast<const char*>(data), size));
  ::close(fd);
  CheckAnswer(answer);
  return 0;
}
