// A real etcd (Debian's etcd-server, /usr/bin/etcd) for tests: one member or a cluster of
// several, on 127.0.0.1 with free ports and data directories in a temporary directory. Every
// member is killed (SIGKILL) and the directory removed when the object goes: no leftovers.
// Members can be killed and started again (same data, same ports) mid-test.
//
// Thread: the test's thread. Errors: the constructor throws (with the member's log) when a
// member does not serve within 20 s; Available() says whether etcd is installed.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/etcd/etcd_client.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {

// PEM files for etcd's TLS: its certificate and key, and the CA that signs clients'
// certificates (etcd then requires one).
struct EtcdTlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
};

class EtcdCluster {
 public:
  static bool Available();
  explicit EtcdCluster(int members = 1, std::optional<EtcdTlsFiles> tls = std::nullopt,
                       std::optional<EtcdTlsFiles> client_tls = std::nullopt);
  ~EtcdCluster();

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:<client port>" of member i; Endpoints(): all of them, comma-separated.
  std::string Endpoint(int i) const;
  std::string Endpoints() const;
  void Kill(int i);   // SIGKILL
  void Start(int i);  // again, with its data
  bool Running(int i) const;
  // Waits until a quorum answers a linearizable read through the members given.
  bool WaitServing(std::chrono::milliseconds timeout, std::optional<int> member = std::nullopt);
  // The number of keys under `prefix` (nullopt: etcd did not answer).
  std::optional<int64_t> CountKeys(const std::string& prefix) const;
  std::string Log(int i) const;
  // Turns etcd's authentication on with one user, root (etcd requires it), and its password.
  bool EnableAuth(const std::string& root_password);

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    std::unique_ptr<ChildRun> proc;
  };
  std::vector<std::string> Args(int i) const;
  // A linearizable count under `prefix` through the members given (-1: all).
  std::optional<int64_t> Count(int member, const std::string& prefix) const;

  TempDir dir_;
  std::optional<EtcdTlsFiles> tls_;
  std::optional<EtcdTlsFiles> client_tls_;  // what the cluster's own client presents
  std::vector<Member> members_;
  // One client per member set (-1: all), kept: a new channel per poll is wasteful.
  mutable std::map<int, std::unique_ptr<rendezvous::etcd::EtcdClient>> clients_;
  std::unique_ptr<boost::asio::io_context> io_;
};

}  // namespace ftrun::testing
