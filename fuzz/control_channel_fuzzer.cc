// Fuzz target: the worker control channel (control_server.h, ftrun-control(7)), through a real
// ControlServer on a Unix socket in a temporary directory: the input is the byte stream a
// worker sends. This process plays local rank 1 (global rank 5) of its agent, so a seed
// starts with {"type":"hello","version":1,"rank":5}. A line "@connection" in the input starts
// a second connection of the same rank (the first stays open, then is replaced).
//
// Flash checkpoint requests (snapshot_*) go to a real FlashService with a 1 MiB budget whose
// persists write under the temporary directory only (its answers carry memfds, which this
// client does not take: the kernel closes them).
//
// For any input: no crash, no sanitizer report, the server closes the connection after the
// sender's EOF (no hang), every line it sends back is a JSON object, and the agent's view of
// the rank stays within the protocol's limits, its snapshot memory within the budget.
#include <openssl/crypto.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_message.h"
#include "fuzz/fuzz_support.h"
#include "launcher/channels/control_server.h"
#include "launcher/checkpoint/flash_service.h"

namespace {

using ftrun::launcher::ControlServer;
using ftrun::launcher::FlashService;

constexpr uint64_t kBudget = 1 << 20;

struct Fixture {
  boost::asio::io_context io;
  std::unique_ptr<ControlServer> server;
  std::unique_ptr<FlashService> flash;
  std::string dir;
  int attempt = 0;
  uint64_t saved = 0;
  uint64_t peer_failed = 0;
};

// Runs the loop until no persist is in flight (nothing may be written while the process
// exits); false after 10 s.
bool DrainPersists(Fixture& f) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (f.flash->persists_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
    if (f.io.stopped()) f.io.restart();
    f.io.run_one_for(std::chrono::milliseconds(10));
  }
  return f.flash->persists_in_flight() == 0;
}

Fixture& F() {
  static Fixture* f = [] {
    // OpenSSL (the persister's sha1 of part names) loads its configuration here, on the main
    // thread, as gRPC does in ftrun: loaded first on the persister's thread, the error state it
    // makes there is never freed (LSan reports it).
    OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, nullptr);
    auto* f = new Fixture;
    char tmpl[] = "/tmp/ftrun-fuzz-control-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) ftrun::fuzz::Fail("mkdtemp");
    f->dir = tmpl;
    ControlServer::Events ev;
    ev.on_saved = [f](int, uint64_t, bool, bool, const std::string&) { ++f->saved; };
    ev.on_peer_failed = [f](int, const std::string&) { ++f->peer_failed; };
    ev.on_snapshot_begin = [f](int lr, const auto& r) { f->flash->Begin(lr, r); };
    ev.on_snapshot_commit = [f](int lr, const auto& r) {
      // Persists stay inside the fixture's directory whatever the input names.
      auto contained = r;
      if (!contained.root().empty()) contained.set_root(f->dir + "/ckpt");
      contained.clear_path();
      f->flash->Commit(lr, contained);
    };
    ev.on_snapshot_steps = [f](int lr, const auto& r) { f->flash->Steps(lr, r); };
    ev.on_snapshot_get = [f](int lr, const auto& r) { f->flash->Get(lr, r); };
    f->server = std::make_unique<ControlServer>(f->io, ev);
    f->flash = std::make_unique<FlashService>(
        f->io, 2, kBudget, std::chrono::system_clock::time_point{},
        [f](int lr, const std::string& json, int fd) { return f->server->Send(lr, json, fd); });
    if (!f->server->Start(f->dir)) ftrun::fuzz::Fail("cannot start the control server");
    std::atexit([] {
      DrainPersists(F());
      F().flash.reset();
      F().server->Stop();
      std::filesystem::remove_all(F().dir);
    });
    return f;
  }();
  return *f;
}

int Connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ftrun::fuzz::Fail("cannot connect to the control socket");
  }
  return fd;
}

// Every line the agent sends is one JSON object.
void CheckAnswer(const std::string& answer) {
  size_t start = 0;
  while (start < answer.size()) {
    size_t nl = answer.find('\n', start);
    FTRUN_FUZZ_CHECK(nl != std::string::npos, "an answer line without a newline");
    const std::string line = answer.substr(start, nl - start);
    FTRUN_FUZZ_CHECK(ftrun::JsonMessage::Parse(line).has_value(),
                     "the agent sent a line that is not JSON: " + line.substr(0, 200));
    start = nl + 1;
  }
}

}  // namespace

FTRUN_FUZZ_INITIALIZE(F())

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return -1;  // the interesting limit is 64 KiB a line
  Fixture& f = F();
  // This process is local rank 1 of two; the node's ranks start at 4.
  f.server->SetWorkers({999999, ::getpgid(0)}, 4, ++f.attempt);
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string_view marker = "\n@connection\n";
  std::vector<int> kept;
  for (size_t cut; (cut = input.find(marker)) != std::string_view::npos;) {
    // An earlier connection: its bytes are sent and it stays open.
    int fd = Connect(f.server->path());
    std::string_view part = input.substr(0, cut + 1);
    input.remove_prefix(cut + marker.size());
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t sent = 0;
    for (int idle = 0; idle < 3;) {
      bool progress = f.io.poll() > 0;
      if (sent < part.size()) {
        ssize_t n = ::send(fd, part.data() + sent, part.size() - sent, MSG_NOSIGNAL);
        if (n > 0) sent += static_cast<size_t>(n), progress = true;
        if (n < 0 && errno != EAGAIN) sent = part.size();
      }
      idle = progress ? 0 : idle + 1;
    }
    kept.push_back(fd);
    if (kept.size() >= 4) break;
  }
  int fd = Connect(f.server->path());
  CheckAnswer(ftrun::fuzz::Converse(f.io, fd, input));
  ::close(fd);
  for (int k : kept) ::close(k);
  for (int i = 0; i < 4; ++i) f.io.poll();
  FTRUN_FUZZ_CHECK(f.flash->store().reserved_bytes() <= kBudget, "snapshot memory over the budget");
  f.flash->WorkerExited(1);
  FTRUN_FUZZ_CHECK(DrainPersists(f), "a persist did not end");
  const auto& rc = f.server->rank(1);
  FTRUN_FUZZ_CHECK(rc.group.size() <= 1024, "a replica group name over 1 KiB");
  FTRUN_FUZZ_CHECK(f.server->rank(0).step == -1 && !f.server->rank(0).connected,
                   "rank 0 changed although no process of it connected");
  return 0;
}
