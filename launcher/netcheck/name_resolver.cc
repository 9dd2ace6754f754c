#include "launcher/netcheck/name_resolver.h"

#include <boost/asio/post.hpp>
#include <mutex>
#include <thread>

namespace ftrun::launcher {

namespace asio = boost::asio;
using asio::ip::tcp;

// Shared by the loop and the lookup's thread. The handler is touched on the loop only, so
// whatever it holds is released there.
struct NameResolver::Lookup {
  std::mutex mu;
  asio::io_context* loop = nullptr;  // null once cancelled: the thread then posts nothing
  Handler handler;

  // On the loop.
  static void Deliver(const std::shared_ptr<Lookup>& self, const boost::system::error_code& ec,
                      Endpoints endpoints) {
    Handler h = std::move(self->handler);
    self->handler = nullptr;
    if (h) h(ec, std::move(endpoints));
  }
};

void NameResolver::Resolve(const std::string& host, uint16_t port, Handler done) {
  Cancel();
  auto lookup = std::make_shared<Lookup>();
  lookup->loop = &loop_;
  lookup->handler = std::move(done);
  pending_ = lookup;
  boost::system::error_code ec;
  const asio::ip::address literal = asio::ip::make_address(host, ec);
  if (!ec) {
    asio::post(loop_,
               [lookup, e = tcp::endpoint(literal, port)] { Lookup::Deliver(lookup, {}, {e}); });
    return;
  }
  std::thread([lookup, host, port] {
    asio::io_context own;
    tcp::resolver resolver(own);
    boost::system::error_code failed;
    Endpoints endpoints;
    for (const auto& entry : resolver.resolve(host, std::to_string(port), failed)) {
      endpoints.push_back(entry.endpoint());
    }
    std::lock_guard<std::mutex> lock(lookup->mu);
    if (!lookup->loop) return;
    asio::post(*lookup->loop, [lookup, failed, endpoints = std::move(endpoints)]() mutable {
      Lookup::Deliver(lookup, failed, std::move(endpoints));
    });
  }).detach();
}

void NameResolver::Cancel() {
  if (!pending_) return;
  {
    std::lock_guard<std::mutex> lock(pending_->mu);
    pending_->loop = nullptr;
  }
  pending_->handler = nullptr;
  pending_.reset();
}

}  // namespace ftrun::launcher
