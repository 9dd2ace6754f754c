// A rendezvous endpoint that can never work fails in seconds with one line naming it and
// what is wrong, instead of the join retry's 900 s: a port held by a program that is not an
// ftrun rendezvous (silent, or answering something else), a host that does not resolve, a
// URL. And c10d without an endpoint is localhost:29400, as in torch.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

// A TCP listener on 127.0.0.1 that accepts and then says nothing, or `answer`.
class Squatter {
 public:
  explicit Squatter(std::string answer = "") : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;
        if (!answer_.empty()) (void)!::write(c, answer_.data(), answer_.size());
        accepted_.push_back(c);  // kept open: a silent peer
      }
    });
  }
  ~Squatter() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (int c : accepted_) ::close(c);
  }
  int port() const { return port_; }

 private:
  std::string answer_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::vector<int> accepted_;
};

std::vector<std::string> C10d(const std::string& endpoint) {
  return {"--nnodes", "2",           "--rdzv-backend", "c10d",        "--rdzv-endpoint",
          endpoint,   "--rdzv-conf", "is_host=0",      "--no-python", "/bin/true"};
}

// The one error line of a failed start.
std::string ErrorLine(const RunResult& r) {
  std::string found;
  for (const auto& line : Lines(r.err)) {
    if (line.find("[error]") != std::string::npos) {
      EXPECT_TRUE(found.empty()) << "more than one error line:\n" << r.err;
      found = line;
    }
  }
  return found;
}

TEST(EndpointErrors, APortHeldByASilentProgram) {
  Squatter silent;
  const std::string ep = "127.0.0.1:" + std::to_string(silent.port());
  auto r = RunFtrun(C10d(ep), {}, std::chrono::seconds(30));
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string e = ErrorLine(r);
  EXPECT_NE(e.find("--rdzv-endpoint " + ep), std::string::npos) << e;
  EXPECT_NE(e.find("not an ftrun rendezvous"), std::string::npos) << e;
}

TEST(EndpointErrors, APortHeldByAnHttpServerOnThisHost) {
  Squatter http("HTTP/1.0 400 Bad Request\r\n\r\n");
  const std::string ep = "127.0.0.1:" + std::to_string(http.port());
  // This host's endpoint: the agent would host it, finds the port taken and looks.
  auto r = RunFtrun({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", ep,
                     "--no-python", "/bin/true"},
                    {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string e = ErrorLine(r);
  EXPECT_NE(e.find("Address already in use"), std::string::npos) << e;
  EXPECT_NE(e.find("not an ftrun rendezvous (it answered something else: 'HTTP/1.0 "),
            std::string::npos)
      << e;
}

TEST(EndpointErrors, AHostThatDoesNotResolve) {
  auto r = RunFtrun(C10d("no-such-host.invalid:29400"), {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const std::string e = ErrorLine(r);
  EXPECT_NE(e.find("--rdzv-endpoint no-such-host.invalid:29400: the host does not resolve"),
            std::string::npos)
      << e;
}

TEST(EndpointErrors, AUrlIsAUsageError) {
  auto r = RunFtrun(C10d("http://127.0.0.1:29400"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "ftrun: error: --rdzv-endpoint: 'http://127.0.0.1:29400' is a URL; give host:port "
            "(127.0.0.1:29400)\n");
}

TEST(EndpointErrors, StaticRendezvousOfAnotherProgram) {
  Squatter silent;
  auto r = RunFtrun({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                     "--master-port", std::to_string(silent.port()), "--no-python", "/bin/true"},
                    {}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(ErrorLine(r).find("not an ftrun rendezvous"), std::string::npos) << r.err;
}

TEST(EndpointErrors, C10dWithoutAnEndpointIsLocalhost29400) {
  auto r = RunFtrun({"--dry-run", "--rdzv-backend", "c10d", "--nnodes", "1:2", "train.py"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"rdzv_endpoint\":\"localhost:29400\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ftrun::testing
