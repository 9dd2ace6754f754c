#include <boost/asio/io_context.hpp>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/endpoint.h"
#include "common/environment.h"
#include "common/json_message.h"
#include "common/log.h"
#include "launcher/cli/status_args.h"
#include "launcher/diagnostics/stacks.h"
#include "launcher/diagnostics/stacks_gatherer.h"
#include "launcher/diagnostics/stacks_report.h"
#include "rendezvous/rendezvous_client.h"

namespace ftrun::launcher {
namespace {

using rendezvous::JobStatus;

std::string Ranks(const rendezvous::NodeStatus& n) {
  if (n.group_rank < 0) return "-";
  if (n.nproc_per_node == 1) return std::to_string(n.base_rank);
  return std::to_string(n.base_rank) + "-" + std::to_string(n.base_rank + n.nproc_per_node - 1);
}

void PrintTable(const JobStatus& s, std::ostream& out) {
  const auto& v = s.view;
  out << "job " << s.run_id << ": " << rendezvous::PhaseName(v.phase) << ", round " << v.round
      << ", restarts " << v.restart_count << "/" << v.max_restarts << ", nodes " << s.nodes.size()
      << " (--nnodes " << s.min_nodes << ":" << s.max_nodes << "), world size " << s.world_size
      << "\n";
  if (!v.reason.empty()) out << "last stop: " << v.reason << "\n";
  if (v.save) {
    out << "fault-time save " << v.save->id << ": "
        << (v.save->collecting ? "collecting progress"
                               : "saving step " + std::to_string(v.save->step))
        << "\n";
  }
  out << std::left << std::setw(11) << "GROUP_RANK" << std::setw(12) << "RANKS" << std::setw(7)
      << "NPROC" << std::setw(24) << "HOST" << std::setw(18) << "ADDR" << std::setw(9) << "STATE"
      << std::setw(20) << "LAST SEEN"
      << "SWITCHES\n";
  for (const auto& n : s.nodes) {
    std::ostringstream seen;
    seen << std::fixed << std::setprecision(1) << n.silent_seconds << "s ago"
         << (n.disconnected ? " (disconnected)" : "");
    out << std::left << std::setw(11) << (n.group_rank < 0 ? "-" : std::to_string(n.group_rank))
        << std::setw(12) << Ranks(n) << std::setw(7) << n.nproc_per_node << std::setw(24) << n.host
        << std::setw(18) << n.addr << std::setw(9)
        << (n.group_rank >= 0 ? "member"
            : n.spare         ? "spare"
                              : "waiting")
        << std::setw(20) << seen.str() << (n.switch_path.empty() ? "-" : n.switch_path) << "\n";
  }
}

std::string ToJson(const JobStatus& s) {
  JsonMessage j(s.run_id, "run_id");
  j.Set("phase", std::string(rendezvous::PhaseName(s.view.phase)))
      .Set("round", s.view.round)
      .Set("restart_count", s.view.restart_count)
      .Set("max_restarts", s.view.max_restarts)
      .Set("reason", s.view.reason)
      .Set("min_nodes", s.min_nodes)
      .Set("max_nodes", s.max_nodes)
      .Set("world_size", s.world_size);
  for (const auto& n : s.nodes) {
    j.Append("nodes", JsonMessage(n.node_id, "node_id")
                          .Set("host", n.host)
                          .Set("addr", n.addr)
                          .Set("group_rank", n.group_rank)
                          .Set("base_rank", n.base_rank)
                          .Set("nproc_per_node", n.nproc_per_node)
                          .Set("silent_seconds", n.silent_seconds)
                          .Set("disconnected", n.disconnected)
                          .Set("switch_path", n.switch_path)
                          .Set("spare", n.spare));
  }
  return j.str();
}

// --stacks: one job-wide dump, merged; what came within the timeout is printed either way.
int PrintStacks(boost::asio::io_context& io, rendezvous::RendezvousClient& client,
                const StatusArgs& a) {
  StacksGatherer gatherer(io, client);
  int code = 1;
  gatherer.Gather(rendezvous::Duration(a.timeout), [&](const rendezvous::RpcOutcome& out,
                                                       const rendezvous::StacksCollection& c) {
    if (!out.ok() && c.id == 0) {
      std::cerr << "ftrun status: " << client.options().target << ": " << out.message << std::endl;
      return;
    }
    std::vector<int> ranks;
    bool native = false;
    for (const auto& s : c.stacks) {
      ranks.push_back(s.rank);
      native |= !s.native.empty();
    }
    std::string title = "ftrun merged stacks: order " + std::to_string(c.id) + ", rank(s) " +
                        (ranks.empty() ? "none" : FoldRanks(ranks));
    if (!c.missing.empty()) {
      std::string hosts;
      for (const auto& h : c.missing) hosts += (hosts.empty() ? "" : ", ") + h;
      title += " (no answer within " + fmt::format("{:g}", a.timeout) + "s from " + hosts + ")";
    }
    if (c.left_out > 0) title += " (" + std::to_string(c.left_out) + " rank(s) left out)";
    StacksReport report = MakeStacksReport(
        c.stacks, title,
        native ? "" : "no node sent one (eu-stack missing there, or no ptrace rights)");
    std::cout << report.text << std::flush;
    code = 0;
    if (a.stacks_dir.empty()) return;
    if (auto s = WriteStacksReport(a.stacks_dir, StacksReportBase("status", c.id), report); !s) {
      std::cerr << "ftrun status: " << s.error().message << std::endl;
      code = 1;
    } else {
      std::cerr << "ftrun status: merged stacks written to " << report.text_path << " and "
                << report.svg_path << std::endl;
    }
  });
  io.run();
  return code;
}

}  // namespace

int RunStatus(const std::vector<std::string>& argv) {
  ParsedStatus cmd = ParseStatusArgs(argv);
  if (auto code = ExitCodeIfNotRun(cmd, "ftrun status")) return *code;
  const StatusArgs& a = cmd.args;
  auto ep = ParseEndpoint(a.endpoint, 29400, "endpoint");
  if (!ep) return UsageError("ftrun status", ep.error().message);
  InitLogging(spdlog::level::warn);
  rendezvous::ClientOptions o;
  o.target = ep->ToString();
  o.run_id = a.rdzv_id;
  rendezvous::RendezvousConf conf;
  conf.token = a.token;
  conf.token_file = a.token_file;
  conf.tls_ca = a.tls_ca;
  conf.tls_cert = a.tls_cert;
  conf.tls_key = a.tls_key;
  auto security = rendezvous::ResolveSecurity(conf, CurrentEnvironment());
  if (!security) return UsageError("ftrun status", security.error().message);
  o.token = security->token;
  o.tls = security->tls;
  o.call_timeout = rendezvous::Duration(a.timeout);
  boost::asio::io_context io;
  rendezvous::RendezvousClient client(io, o);
  if (a.stacks) return PrintStacks(io, client, a);
  int code = 1;
  client.Status([&](const rendezvous::RpcOutcome& out, const JobStatus& s) {
    if (!out.ok()) {
      std::cerr << "ftrun status: " << o.target << ": " << out.message << std::endl;
      return;
    }
    if (a.json) {
      std::cout << ToJson(s) << std::endl;
    } else {
      PrintTable(s, std::cout);
    }
    code = 0;
  });
  io.run();
  return code;
}

}  // namespace ftrun::launcher
