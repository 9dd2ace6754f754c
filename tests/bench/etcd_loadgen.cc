// etcd rendezvous load generator: N simulated agents (each the agent's real EtcdCoordinator,
// with its own client, lease, node key and watches; one of them leads) form one round through
// a running etcd, then stay in the running round for a while. Prints how long until every
// agent was told its round started, and the etcd calls per agent per second at steady state
// (keep-alives; watches are streams that stay open). Used by scripts/bench_etcd.py.
//
//   etcd_loadgen --endpoints 127.0.0.1:2379[,...] --nodes 1000 [--steady 10] [--lease-ttl 5]
//                [--run-id bench] [--timeout 120]
// Output (one line): nodes=N seconds=S steady_calls_per_agent_per_s=R
#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "launcher/config/launch_config.h"
#include "launcher/coordinator/etcd_coordinator.h"

namespace {

using namespace ftrun;
using Clock = std::chrono::steady_clock;

struct Counter : launcher::Coordinator::Listener {
  int* started;
  void OnRoundStarted(const rendezvous::NodeAssignment&) override { ++*started; }
  void OnRestartRequested(const std::string&) override {}
  void OnJobFinished(const launcher::JobResult& r) override {
    std::cerr << "job finished early: " << r.reason << "\n";
    std::_Exit(1);
  }
  void OnSaveOrder(uint64_t, const rendezvous::SaveOrder&) override {}
};

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string endpoints = Arg(argc, argv, "--endpoints", "127.0.0.1:2379");
  const int nodes = std::atoi(Arg(argc, argv, "--nodes", "100").c_str());
  const double steady = std::atof(Arg(argc, argv, "--steady", "10").c_str());
  const std::string ttl = Arg(argc, argv, "--lease-ttl", "5");
  const std::string run_id = Arg(argc, argv, "--run-id", "bench");
  const double timeout = std::atof(Arg(argc, argv, "--timeout", "120").c_str());
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  InitLogging(spdlog::level::warn);

  launcher::TorchrunArgs a;
  a.nnodes = std::to_string(nodes);
  a.nproc_per_node = "1";
  a.rdzv_backend = "etcd";
  a.rdzv_endpoint = endpoints;
  a.rdzv_id = run_id;
  a.rdzv_conf = "last_call_timeout=1,lease_ttl=" + ttl;
  a.script = "/bin/true";
  a.no_python = true;
  auto config = launcher::BuildLaunchConfig(a, {});
  if (!config) {
    std::cerr << config.error().message << "\n";
    return 2;
  }
  boost::asio::io_context io;
  int started = 0;
  Counter listener;
  listener.started = &started;
  std::vector<std::unique_ptr<launcher::Coordinator>> agents;
  const auto t0 = Clock::now();
  for (int i = 0; i < nodes; ++i) {
    rendezvous::NodeInfo node;
    node.node_id = "sim" + std::to_string(i) + ":" + run_id;
    node.addr = node.host = "sim" + std::to_string(i);
    node.nproc_per_node = config->nproc_per_node;
    auto c = launcher::MakeEtcdCoordinator(io, *config, {}, std::move(node), nullptr, 0);
    if (!c) {
      std::cerr << c.error().message << "\n";
      return 1;
    }
    agents.push_back(std::move(*c));
    agents.back()->Start(&listener);
  }
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  while (started < nodes && Clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(50));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (started < nodes) {
    std::cerr << "only " << started << " of " << nodes << " agents started within " << timeout
              << " s\n";
    return 1;
  }
  // Steady state: the round runs; count every etcd call the agents make.
  const uint64_t before = rendezvous::etcd::EtcdClient::CallsStarted();
  const auto steady_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(steady));
  while (Clock::now() < steady_end) io.run_one_for(std::chrono::milliseconds(50));
  const uint64_t calls = rendezvous::etcd::EtcdClient::CallsStarted() - before;
  std::cout << "nodes=" << nodes << " seconds=" << seconds
            << " steady_calls_per_agent_per_s=" << calls / (steady * nodes) << std::endl;
  std::_Exit(0);  // the leases expire with the process; etcd is the benchmark's own
}
