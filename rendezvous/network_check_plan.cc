#include "rendezvous/network_check_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace ftrun::rendezvous {
namespace {

// Per-node facts gathered from one round's results.
struct RoundFacts {
  std::map<std::string, bool> took_part;  // node -> all its pairs passed
  std::map<std::string, double> best_mbps;
};

bool PairPasses(const PairResult& r, const NetworkCheckOptions& o) {
  return r.ok && !(o.min_bandwidth_mbps > 0 && r.Mbps() < o.min_bandwidth_mbps);
}

RoundFacts Collect(const std::vector<PairResult>& results) {
  RoundFacts f;
  for (const auto& r : results) {
    for (const std::string* n : {&r.pair.a, &r.pair.b}) {
      auto [it, inserted] = f.took_part.emplace(*n, true);
      if (!r.ok) {
        it->second = false;
        continue;
      }
      double& best = f.best_mbps[*n];
      best = std::max(best, r.Mbps());
    }
  }
  return f;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The planned pairs with their results: a missing result is a failure, and a pair below the
// minimum bandwidth fails.
std::vector<PairResult> Match(const std::vector<CheckPair>& plan,
                              const std::vector<PairResult>& results,
                              const NetworkCheckOptions& o) {
  std::vector<PairResult> out;
  for (const auto& p : plan) {
    auto it = std::find_if(results.begin(), results.end(),
                           [&](const PairResult& r) { return r.pair.a == p.a && r.pair.b == p.b; });
    PairResult r;
    if (it == results.end()) {
      r.reason = "no result";
    } else {
      r = *it;
      if (r.ok && !PairPasses(r, o)) {
        r.ok = false;
        r.reason = fmt::format("{:.1f} MB/s is below the minimum {:.1f} MB/s", r.Mbps(),
                               o.min_bandwidth_mbps);
      }
    }
    r.pair = p;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

const char* VerdictName(NodeVerdict v) {
  constexpr const char* kNames[] = {"healthy", "straggler", "faulty"};
  return kNames[static_cast<int>(v)];
}

std::vector<std::string> NetworkCheckReport::Faulty() const {
  std::vector<std::string> out;
  for (const auto& n : nodes) {
    if (n.verdict == NodeVerdict::kFaulty) out.push_back(n.node);
  }
  return out;
}

std::vector<std::string> NetworkCheckReport::Stragglers() const {
  std::vector<std::string> out;
  for (const auto& n : nodes) {
    if (n.verdict == NodeVerdict::kStraggler) out.push_back(n.node);
  }
  return out;
}

std::vector<CheckPair> PlanRound0(const std::vector<std::string>& nodes) {
  std::vector<CheckPair> plan;
  size_t n = nodes.size();
  for (size_t i = 0; i + 1 < n; i += 2) plan.push_back({nodes[i], nodes[i + 1], 0, 0});
  if (n >= 3 && n % 2 == 1) plan.push_back({nodes[n - 1], nodes[n - 2], 0, 1});
  return plan;
}

std::vector<CheckPair> PlanRound1(const std::vector<std::string>& nodes,
                                  const std::vector<PairResult>& round0,
                                  const NetworkCheckOptions& options) {
  std::vector<PairResult> r0 = Match(PlanRound0(nodes), round0, options);
  RoundFacts f = Collect(r0);
  std::vector<double> bw;
  for (const auto& [node, mbps] : f.best_mbps) bw.push_back(mbps);
  double slow_below = options.straggler_fraction * Median(bw);

  std::vector<std::string> suspects, good;
  for (const auto& n : nodes) {
    auto it = f.took_part.find(n);
    if (it == f.took_part.end()) continue;  // a single node: nothing was measured
    bool passed = it->second;
    bool slow = passed && options.straggler_fraction > 0 && f.best_mbps[n] < slow_below;
    (passed && !slow ? good : suspects).push_back(n);
  }
  std::vector<CheckPair> plan;
  if (suspects.empty()) return plan;
  if (!good.empty()) {
    for (size_t i = 0; i < suspects.size(); ++i) {
      plan.push_back({suspects[i], good[i % good.size()], 1, static_cast<int>(i / good.size())});
    }
    return plan;
  }
  // No reference node: try the suspects against each other, avoiding round-0 pairs.
  std::set<std::pair<std::string, std::string>> tried;
  for (const auto& r : r0) {
    tried.insert({r.pair.a, r.pair.b});
    tried.insert({r.pair.b, r.pair.a});
  }
  std::vector<bool> used(suspects.size(), false);
  for (size_t i = 0; i < suspects.size(); ++i) {
    if (used[i]) continue;
    for (size_t j = i + 1; j < suspects.size(); ++j) {
      if (used[j] || tried.count({suspects[i], suspects[j]})) continue;
      used[i] = used[j] = true;
      plan.push_back({suspects[i], suspects[j], 1, 0});
      break;
    }
  }
  return plan;
}

NetworkCheckReport Evaluate(const std::vector<std::string>& nodes,
                            const std::vector<PairResult>& round0,
                            const std::vector<PairResult>& round1,
                            const NetworkCheckOptions& options) {
  NetworkCheckReport report;
  std::vector<PairResult> r0 = Match(PlanRound0(nodes), round0, options);
  std::vector<PairResult> r1 = Match(PlanRound1(nodes, round0, options), round1, options);
  RoundFacts f0 = Collect(r0);
  RoundFacts f1 = Collect(r1);
  report.pairs = r0;
  report.pairs.insert(report.pairs.end(), r1.begin(), r1.end());

  // Faulty: took part in round 0, passed neither round.
  std::set<std::string> faulty;
  for (const auto& n : nodes) {
    auto it0 = f0.took_part.find(n);
    if (it0 == f0.took_part.end() || it0->second) continue;
    auto it1 = f1.took_part.find(n);
    if (it1 != f1.took_part.end() && it1->second) continue;
    faulty.insert(n);
  }

  std::map<std::string, double> best;
  for (const auto& r : report.pairs) {
    if (!r.ok) continue;
    for (const std::string* n : {&r.pair.a, &r.pair.b}) best[*n] = std::max(best[*n], r.Mbps());
  }
  std::vector<double> bw;
  for (const auto& n : nodes) {
    if (!faulty.count(n) && best.count(n)) bw.push_back(best[n]);
  }
  report.median_mbps = Median(bw);
  if (options.straggler_fraction > 0) {
    report.straggler_below_mbps = options.straggler_fraction * report.median_mbps;
  }

  for (const auto& n : nodes) {
    NodeReport nr{n, NodeVerdict::kHealthy, best.count(n) ? best[n] : 0.0, ""};
    if (faulty.count(n)) {
      nr.verdict = NodeVerdict::kFaulty;
      bool healthy_partner = false;
      std::vector<std::string> why;
      for (const auto& r : report.pairs) {
        if (r.pair.a != n && r.pair.b != n) continue;
        const std::string& peer = r.pair.a == n ? r.pair.b : r.pair.a;
        if (!faulty.count(peer)) healthy_partner = true;
        if (!r.ok) why.push_back(fmt::format("round {} with {}: {}", r.pair.round, peer, r.reason));
      }
      if (f1.took_part.count(n) == 0) why.push_back("round 1: no partner to re-test with");
      nr.reason = fmt::format("{}", fmt::join(why, "; "));
      if (!healthy_partner) report.isolated = false;
    } else if (report.straggler_below_mbps > 0 && best.count(n) &&
               best[n] < report.straggler_below_mbps) {
      nr.verdict = NodeVerdict::kStraggler;
      nr.reason = fmt::format("best {:.1f} MB/s is below {} x the median {:.1f} MB/s", best[n],
                              options.straggler_fraction, report.median_mbps);
    }
    report.nodes.push_back(std::move(nr));
  }
  return report;
}

std::vector<std::string> RenderTable(const NetworkCheckReport& report) {
  size_t w = 4;  // width of the node columns
  for (const auto& n : report.nodes) w = std::max(w, n.node.size());
  std::vector<std::string> out;
  out.push_back(fmt::format("{:<5} {:<4} {:<{}} {:<{}} {:>10} {:>10} {:>8}  {}", "round", "wave",
                            "a", w, "b", w, "a->b MB/s", "b->a MB/s", "rtt ms", "result"));
  for (const auto& r : report.pairs) {
    std::string result = r.ok ? "ok" : "FAILED: " + r.reason;
    if (r.ok || r.mbps_ab > 0 || r.mbps_ba > 0) {
      out.push_back(fmt::format("{:<5} {:<4} {:<{}} {:<{}} {:>10.1f} {:>10.1f} {:>8.3f}  {}",
                                r.pair.round, r.pair.wave, r.pair.a, w, r.pair.b, w, r.mbps_ab,
                                r.mbps_ba, r.rtt_ms, result));
    } else {
      out.push_back(fmt::format("{:<5} {:<4} {:<{}} {:<{}} {:>10} {:>10} {:>8}  {}", r.pair.round,
                                r.pair.wave, r.pair.a, w, r.pair.b, w, "-", "-", "-", result));
    }
  }
  for (const auto& n : report.nodes) {
    std::string line =
        fmt::format("{:<{}} {:>10.1f} MB/s  {}", n.node, w, n.mbps, VerdictName(n.verdict));
    if (!n.reason.empty()) line += " (" + n.reason + ")";
    out.push_back(std::move(line));
  }
  out.push_back(fmt::format("median {:.1f} MB/s; straggler below {:.1f} MB/s{}", report.median_mbps,
                            report.straggler_below_mbps,
                            report.isolated ? "" : "; the faulty node(s) could not be isolated"));
  return out;
}

JsonMessage ToJson(const NetworkCheckReport& report) {
  JsonMessage j("network_check", "event");
  j.Set("isolated", report.isolated);
  j.Set("median_mbps", report.median_mbps);
  j.Set("straggler_below_mbps", report.straggler_below_mbps);
  for (const auto& r : report.pairs) {
    JsonMessage p("", "reason");
    p.Set("reason", r.reason);
    p.Set("round", r.pair.round).Set("wave", r.pair.wave).Set("a", r.pair.a).Set("b", r.pair.b);
    p.Set("ok", r.ok).Set("mbps_ab", r.mbps_ab).Set("mbps_ba", r.mbps_ba).Set("rtt_ms", r.rtt_ms);
    j.Append("pairs", p);
  }
  for (const auto& n : report.nodes) {
    JsonMessage m(n.node, "node");
    m.Set("verdict", VerdictName(n.verdict)).Set("mbps", n.mbps).Set("reason", n.reason);
    j.Append("nodes", m);
  }
  j.Set("faulty", report.Faulty());
  j.Set("stragglers", report.Stragglers());
  return j;
}

}  // namespace ftrun::rendezvous
