// EtcdWatch: a watch of a key or a prefix that goes on across etcd's failures. It resumes
// from the revision after the last event it delivered when its stream ends (a member died,
// etcd restarted) and when etcd has not confirmed its creation within a few seconds (a
// stream opened while etcd was starting may never be served).
//
// Thread: loop only; `events` runs on the loop with every response's events, in revision
// order. Dropping the object cancels the watch; no callback runs after that.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/etcd/etcd_client.h"

namespace ftrun::rendezvous::etcd {

class EtcdWatch {
 public:
  using Events = std::function<void(const std::vector<pb::Event>&)>;

  // range_end "" : the key alone. Starts at once, from start_revision.
  EtcdWatch(boost::asio::io_context& io, EtcdClient& client, std::string key, std::string range_end,
            int64_t start_revision, Events events, std::function<void()> restarted = {});
  ~EtcdWatch();

 private:
  void Open();
  void Reopen(std::chrono::milliseconds delay);

  EtcdClient& client_;
  std::string key_;
  std::string range_end_;
  int64_t next_rev_;
  Events events_;
  std::function<void()> restarted_;
  boost::asio::steady_timer retry_;
  boost::asio::steady_timer created_timer_;
  std::unique_ptr<EtcdStream> stream_;
  bool created_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::rendezvous::etcd
