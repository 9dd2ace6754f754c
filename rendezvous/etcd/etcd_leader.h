// EtcdLeader: the rendezvous of an etcd-backed job while this agent holds the leader key. It
// drives the one RendezvousState of the job (the same pure state machine as the built-in
// server) from etcd: the nodes' keys are their joins (a key that goes, with its agent's
// lease, is a lost node), their report keys are applied in order, and every node's view is
// written to its views/ key whenever it changes in substance (etcd_keys.h). Timed transitions
// use this agent's clock. A leader that takes over starts a fresh state machine from the
// nodes' keys, whose claims (next round, restarts spent) carry the job on, as a restarted
// built-in server does.
//
// Thread: loop only. Errors: a write refused because the leader key is no longer ours calls
// `deposed` (once); etcd unreachable is retried (the agent's lease decides when to give up).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/etcd/etcd_client.h"
#include "rendezvous/etcd/etcd_keys.h"
#include "rendezvous/etcd/etcd_watch.h"
#include "rendezvous/rendezvous_state.h"
#include "rendezvous/transition_log.h"

namespace ftrun::rendezvous::etcd {

struct EtcdLeaderOptions {
  EtcdKeys keys{"/ftrun/rdzv", "none"};
  JobSpec job;
  int64_t lease_id = 0;                 // the leader's lease: its views are bound to it
  int64_t epoch = 0;                    // the leader key's create revision
  std::string self;                     // this agent's node id
  std::shared_ptr<EventLog> event_log;  // the agent's --event-log (may be null)
};

class EtcdLeader {
 public:
  EtcdLeader(boost::asio::io_context& io, EtcdClient& client, EtcdLeaderOptions options,
             std::function<void(const std::string&)> deposed);
  ~EtcdLeader();

  void Start();
  // Ends the job (as failed, with `abort_reason`) if it is still going, then waits until
  // every other node's key is gone (it saw the end and left) or `linger` passes; then `done`.
  void FinishAndStop(const std::string& abort_reason, Duration linger, std::function<void()> done);
  void Stop();
  const RendezvousState& state() const { return state_; }

 private:
  void OnNodes(const std::vector<pb::Event>& events);
  void NodePut(const std::string& id, const std::string& value);
  void OnReports(const std::vector<pb::Event>& events);
  void AfterEvent();
  void Publish();
  void ArmTimer();
  void CheckLinger();
  Duration Since() const;

  boost::asio::io_context& io_;
  EtcdClient& client_;
  EtcdLeaderOptions opts_;
  std::function<void(const std::string&)> deposed_;
  RendezvousState state_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer retry_timer_;
  boost::asio::steady_timer linger_timer_;
  std::unique_ptr<EtcdWatch> watches_[2];  // nodes/, reports/
  bool started_ = false;
  bool stopped_ = false;

  std::set<std::string> live_;                  // node keys present
  std::map<std::string, NodeInfo> pending_;     // joins to retry (node rank held)
  std::map<std::string, std::string> refused_;  // node -> why its join was refused
  std::map<std::string, uint64_t> published_;   // node -> state version it was sent
  std::vector<std::string> applied_reports_;    // keys to delete
  bool publishing_ = false;
  bool dirty_ = false;
  TransitionLog transitions_;
  std::function<void()> on_lingered_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::rendezvous::etcd
