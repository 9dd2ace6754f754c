#include "tests/support/etcd_cluster.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <stdexcept>

#include "etcd/rpc.grpc.pb.h"
#include "launcher/config/host.h"
#include "rendezvous/etcd/etcd_client.h"

namespace ftrun::testing {
namespace {

constexpr const char* kEtcd = "/usr/bin/etcd";
namespace etcd = rendezvous::etcd;

}  // namespace

bool EtcdCluster::Available() { return ::access(kEtcd, X_OK) == 0; }

EtcdCluster::EtcdCluster(int members, std::optional<EtcdTlsFiles> tls,
                         std::optional<EtcdTlsFiles> client_tls)
    : tls_(std::move(tls)),
      client_tls_(std::move(client_tls)),
      io_(std::make_unique<boost::asio::io_context>()) {
  // A port picked free can be taken by another test before etcd binds it: etcd then exits at
  // once, and the cluster starts again on other ports (a fresh data directory each time).
  for (int attempt = 0;; ++attempt) {
    members_.clear();
    for (int i = 0; i < members; ++i) {
      Member m;
      m.name = "m" + std::to_string(i);
      m.client_port = TestPort();
      m.peer_port = TestPort();
      members_.push_back(std::move(m));
    }
    for (int i = 0; i < members; ++i) {
      std::filesystem::remove_all(dir_ / members_[i].name);
      Start(i);
    }
    auto port_taken = [&] {
      for (int i = 0; i < members; ++i) {
        if (!Running(i) && Log(i).find("address already in use") != std::string::npos) return true;
      }
      return false;
    };
    const bool ready = WaitFor([&] { return port_taken() || Count(-1, "/").has_value(); },
                               std::chrono::seconds(20));
    const bool taken = port_taken();
    if (ready && !taken) return;
    std::string logs;
    for (int i = 0; i < members; ++i) logs += Log(i);
    for (int i = 0; i < members; ++i) Kill(i);
    clients_.clear();
    if (!taken || attempt == 2) {
      throw std::runtime_error("etcd did not start serving within 20 s:\n" + logs);
    }
  }
}

EtcdCluster::~EtcdCluster() {
  clients_.clear();
  for (int i = 0; i < size(); ++i) Kill(i);
}

std::vector<std::string> EtcdCluster::Args(int i) const {
  const Member& m = members_[i];
  std::string cluster;
  for (const auto& o : members_) {
    cluster +=
        (cluster.empty() ? "" : ",") + o.name + "=http://127.0.0.1:" + std::to_string(o.peer_port);
  }
  const std::string client =
      (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(m.client_port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer_port);
  std::vector<std::string> tls;
  if (tls_) {
    tls = {"--cert-file",       tls_->cert, "--key-file",        tls_->key,
           "--trusted-ca-file", tls_->ca,   "--client-cert-auth"};
  }
  std::vector<std::string> args = {
      "--name", m.name, "--data-dir", dir_ / m.name, "--listen-client-urls", client,
      "--advertise-client-urls", client, "--listen-peer-urls", peer,
      "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
      "--initial-cluster-state", "new", "--initial-cluster-token", "ftrun-test",
      // Quick elections on loopback: a killed leader is replaced within a second.
      "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "warn", "--logger",
      "zap"};
  args.insert(args.end(), tls.begin(), tls.end());
  return args;
}

void EtcdCluster::Start(int i) { members_[i].proc = std::make_unique<ChildRun>(kEtcd, Args(i)); }

void EtcdCluster::Kill(int i) {
  if (!members_[i].proc) return;
  members_[i].proc->Signal(SIGKILL);
  members_[i].proc->Wait(std::chrono::seconds(10));
}

bool EtcdCluster::Running(int i) const {
  return members_[i].proc && ProcessAlive(members_[i].proc->pid());
}

std::string EtcdCluster::Endpoint(int i) const {
  // A name the test certificates hold (as DNS name) when etcd speaks TLS.
  return (tls_ ? "localhost:" : "127.0.0.1:") + std::to_string(members_[i].client_port);
}

std::string EtcdCluster::Endpoints() const {
  std::string s;
  for (int i = 0; i < size(); ++i) s += (i ? "," : "") + Endpoint(i);
  return s;
}

std::string EtcdCluster::Log(int i) const {
  return members_[i].proc ? "[" + members_[i].name + "] " + members_[i].proc->Err() : "";
}

std::optional<int64_t> EtcdCluster::Count(int member, const std::string& prefix) const {
  auto& client = clients_[member];
  if (!client) {
    etcd::EtcdClientOptions o;
    for (int i = 0; i < size(); ++i) {
      if (member < 0 || member == i) o.endpoints.push_back(Endpoint(i));
    }
    o.call_timeout = std::chrono::seconds(2);
    if (client_tls_) {
      o.https = true;
      o.tls.cert = ReadFile(client_tls_->cert);
      o.tls.key = ReadFile(client_tls_->key);
      o.tls.ca = ReadFile(client_tls_->ca);
    }
    auto c = etcd::EtcdClient::Create(*io_, o);
    if (!c) return std::nullopt;
    client = std::move(*c);
  }
  std::optional<int64_t> out;
  bool done = false;
  etcd::pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(etcd::PrefixEnd(prefix));
  req.set_count_only(true);
  client->Range(req, [&](const etcd::EtcdStatus& st, const etcd::pb::RangeResponse& r) {
    if (st.ok()) out = r.count();
    done = true;
  });
  io_->restart();
  while (!done) io_->run_one_for(std::chrono::seconds(3));
  return out;
}

bool EtcdCluster::WaitServing(std::chrono::milliseconds timeout, std::optional<int> member) {
  return WaitFor([&] { return Count(member.value_or(-1), "/").has_value(); }, timeout);
}

std::optional<int64_t> EtcdCluster::CountKeys(const std::string& prefix) const {
  return Count(-1, prefix);
}

}  // namespace ftrun::testing

namespace ftrun::testing {

bool EtcdCluster::EnableAuth(const std::string& root_password) {
  auto stub = etcdserverpb::Auth::NewStub(
      grpc::CreateChannel(Endpoint(0), grpc::InsecureChannelCredentials()));
  auto call = [](auto method) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return method(&ctx).ok();
  };
  etcdserverpb::AuthUserAddRequest add;
  add.set_name("root");
  add.set_password(root_password);
  etcdserverpb::AuthUserAddResponse add_resp;
  etcdserverpb::AuthUserGrantRoleRequest grant;
  grant.set_user("root");
  grant.set_role("root");
  etcdserverpb::AuthUserGrantRoleResponse grant_resp;
  etcdserverpb::AuthEnableResponse enable_resp;
  clients_.clear();  // their calls would need the token from now on
  return call([&](grpc::ClientContext* c) { return stub->UserAdd(c, add, &add_resp); }) &&
         call([&](grpc::ClientContext* c) { return stub->UserGrantRole(c, grant, &grant_resp); }) &&
         call([&](grpc::ClientContext* c) {
           return stub->AuthEnable(c, etcdserverpb::AuthEnableRequest{}, &enable_resp);
         });
}

}  // namespace ftrun::testing
