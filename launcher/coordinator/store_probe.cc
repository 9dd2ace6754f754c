#include "launcher/coordinator/store_probe.h"

#include <algorithm>
#include <boost/asio/connect.hpp>

namespace ftrun::launcher {

struct StoreProbe::Attempt {
  explicit Attempt(boost::asio::io_context& io) : resolver(io), socket(io), deadline(io) {}
  boost::asio::ip::tcp::resolver resolver;
  boost::asio::ip::tcp::socket socket;
  boost::asio::steady_timer deadline;
  bool over = false;
  void Cancel() {
    over = true;
    resolver.cancel();
    boost::system::error_code ec;
    socket.close(ec);
    deadline.cancel();
  }
};

StoreProbe::StoreProbe(boost::asio::io_context& io, StoreProbeOptions options,
                       Unreachable unreachable)
    : io_(io), opts_(options), unreachable_(std::move(unreachable)), timer_(io) {}

StoreProbe::~StoreProbe() { Stop(); }

void StoreProbe::Watch(uint64_t round, const std::string& host, int port, int nodes) {
  if (round_ == round && host_ == host && port_ == port) return;
  Stop();
  interval_ = opts_.interval * std::max(1, nodes / 128);
  round_ = round;
  host_ = host;
  port_ = port;
  failed_ = 0;
  reported_ = false;
  timer_.expires_after(interval_);
  timer_.async_wait([this, gen = generation_](const boost::system::error_code& ec) {
    if (!ec && gen == generation_) Check();
  });
}

void StoreProbe::Stop() {
  ++generation_;
  round_.reset();
  timer_.cancel();
  if (attempt_) attempt_->Cancel();
  attempt_.reset();
}

void StoreProbe::Check() {
  auto a = std::make_shared<Attempt>(io_);
  attempt_ = a;
  const uint64_t gen = generation_;
  a->deadline.expires_after(opts_.timeout);
  a->deadline.async_wait([this, a, gen](const boost::system::error_code& ec) {
    if (ec || a->over || gen != generation_) return;
    a->Cancel();
    Done("no answer within " + std::to_string(opts_.timeout.count()) + " ms");
  });
  a->resolver.async_resolve(host_, std::to_string(port_),
                            [this, a, gen](const boost::system::error_code& ec,
                                           boost::asio::ip::tcp::resolver::results_type results) {
                              if (a->over || gen != generation_) return;
                              if (ec) {
                                a->Cancel();
                                return Done(ec.message());
                              }
                              boost::asio::async_connect(
                                  a->socket, results,
                                  [this, a, gen](const boost::system::error_code& ec,
                                                 const boost::asio::ip::tcp::endpoint&) {
                                    if (a->over || gen != generation_) return;
                                    a->Cancel();
                                    Done(ec ? ec.message() : "");
                                  });
                            });
}

void StoreProbe::Done(const std::string& error) {
  attempt_.reset();
  if (!round_) return;
  ++checks_;
  if (error.empty()) {
    failed_ = 0;
  } else if (++failed_ >= opts_.failures && !reported_) {
    reported_ = true;
    unreachable_(*round_, host_ + ":" + std::to_string(port_) + ": " + error);
    if (!round_) return;  // the callback stopped the probe
  }
  timer_.expires_after(interval_);
  timer_.async_wait([this, gen = generation_](const boost::system::error_code& ec) {
    if (!ec && gen == generation_) Check();
  });
}

}  // namespace ftrun::launcher
