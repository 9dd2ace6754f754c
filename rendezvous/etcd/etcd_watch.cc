#include "rendezvous/etcd/etcd_watch.h"

#include "common/log.h"

namespace ftrun::rendezvous::etcd {

EtcdWatch::EtcdWatch(boost::asio::io_context& io, EtcdClient& client, std::string key,
                     std::string range_end, int64_t start_revision, Events events,
                     std::function<void()> restarted)
    : client_(client),
      key_(std::move(key)),
      range_end_(std::move(range_end)),
      next_rev_(start_revision),
      events_(std::move(events)),
      restarted_(std::move(restarted)),
      retry_(io),
      created_timer_(io) {
  Open();
}

EtcdWatch::~EtcdWatch() { *alive_ = false; }

void EtcdWatch::Open() {
  pb::WatchCreateRequest create;
  create.set_key(key_);
  if (!range_end_.empty()) create.set_range_end(range_end_);
  create.set_start_revision(next_rev_);
  created_ = false;
  stream_ = client_.Watch(
      create,
      [this](const pb::WatchResponse& resp) {
        if (resp.created()) created_ = true;
        if (resp.canceled()) {
          // Compacted past our revision: what was lost is gone; go on from the oldest kept.
          RendezvousLog()->warn("etcd watch of {} cancelled ({}); watching again", key_,
                                resp.cancel_reason());
          if (resp.compact_revision() > next_rev_) next_rev_ = resp.compact_revision();
          return Reopen(std::chrono::milliseconds(100));
        }
        if (resp.events().empty()) return;
        std::vector<pb::Event> events(resp.events().begin(), resp.events().end());
        for (const auto& e : events) next_rev_ = std::max(next_rev_, e.kv().mod_revision() + 1);
        events_(events);
      },
      [this](const EtcdStatus& st) {
        if (st.cancelled()) return;
        RendezvousLog()->info("etcd watch of {} ended ({}); watching again from revision {}", key_,
                              st.ToString(), next_rev_);
        Reopen(std::chrono::milliseconds(100));
      });
  std::weak_ptr<bool> alive = alive_;
  created_timer_.expires_after(std::chrono::seconds(2));
  created_timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired() || created_) return;
    RendezvousLog()->info("etcd has not confirmed the watch of {} after 2s; watching again", key_);
    Reopen(std::chrono::milliseconds(0));
  });
}

void EtcdWatch::Reopen(std::chrono::milliseconds delay) {
  stream_.reset();
  created_timer_.cancel();
  std::weak_ptr<bool> alive = alive_;
  retry_.expires_after(delay);
  retry_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired()) return;
    Open();
    if (restarted_) restarted_();
  });
}

}  // namespace ftrun::rendezvous::etcd
