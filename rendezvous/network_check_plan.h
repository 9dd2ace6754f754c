// Network check planning and attribution (--network-check): which agents measure each other
// in which round, and what the measurements say about each node. Pure logic: no I/O, no
// clock; the server runs the rounds, the agents run the probes (launcher/netcheck/pair_probe.h).
//
// Rounds (dlrover's NetworkCheckRendezvousManager, reference/dlrover.md §3, with one change:
// slow pairs are re-tested too, so a slow node's partner is not reported as a straggler):
//   Round 0 pairs neighbours in the given order: {n0,n1}, {n2,n3}, ... An odd node out n_k
//   (k = last index, k >= 2) is also tested, as the listener, against its neighbour n_{k-1};
//   that is n_{k-1}'s second test, so it runs in wave 1, after wave 0.
//   Round 1 re-tests every suspect: a node in a round-0 pair that failed (error, timeout,
//   or below the minimum bandwidth) or whose round-0 bandwidth is below straggler_fraction
//   of the round-0 median. Suspect i (in node order) is paired with good node i mod G, where
//   the good nodes are the rest in node order, one wave per G suspects (so partners are
//   distinct where possible). With no good node at all, suspects are paired with each other
//   in pairs not tried in round 0 (greedily, in node order); a suspect left without a partner
//   is not re-tested. The suspect is the listener, so a node whose inbound port is blocked
//   fails again (a node that is only ever a client is not tested for inbound connections).
//   Round 1 is empty when round 0 found no suspect.
// Waves: within a round a node takes part in at most one pair per wave; the caller runs the
// pairs of a wave concurrently and the waves one after the other.
//
// Attribution (Evaluate):
//   * A pair passes when the probe succeeded and, if min_bandwidth_mbps > 0, its bandwidth
//     (the slower direction) is at least that.
//   * A node passes a round when it took part in that round and all its pairs passed.
//     Faulty = took part in round 0 and passed neither round 0 nor round 1. A round-0
//     partner that passed round 1 is therefore not blamed. With no healthy reference (two
//     nodes and one broken link, or every link broken) every node of a failed pair ends up
//     faulty and `isolated` is false: the caller fails the job with a message naming them.
//   * Bandwidth of a node = the best (max) bandwidth of its passing pairs over both rounds:
//     the best evidence of what the node itself can do (dlrover takes the best time too).
//     Straggler = a non-faulty node whose bandwidth is below straggler_fraction x the median
//     over the non-faulty nodes (mean of the two middle values for an even count); exactly
//     at the threshold is not a straggler. With two nodes there is never a straggler.
//   * A single node (or none) has nothing to measure: empty plan, every node healthy.
// Bandwidth unit: MB/s, MB = 1e6 bytes.
#pragma once

#include <string>
#include <vector>

#include "common/json_message.h"

namespace ftrun::rendezvous {

struct NetworkCheckOptions {
  double straggler_fraction = 0.5;  // of the median; 0 turns straggler detection off
  double min_bandwidth_mbps = 0;    // 0: no minimum (--min-network-bandwidth)
};

// One probe between two nodes: `a` listens, `b` connects.
struct CheckPair {
  std::string a;
  std::string b;
  int round = 0;
  int wave = 0;

  bool operator==(const CheckPair&) const = default;
};

// The measurement of one pair, as the agents report it.
struct PairResult {
  CheckPair pair;
  bool ok = false;
  std::string reason;  // why it failed (names the peer), "" when ok
  double mbps_ab = 0;  // a -> b
  double mbps_ba = 0;  // b -> a
  double rtt_ms = 0;   // median round trip

  // The slower direction, the pair's bandwidth.
  double Mbps() const { return mbps_ab < mbps_ba ? mbps_ab : mbps_ba; }
};

// VerdictName names them in this order.
enum class NodeVerdict { kHealthy, kStraggler, kFaulty };
const char* VerdictName(NodeVerdict v);  // "healthy", "straggler", "faulty"

struct NodeReport {
  std::string node;
  NodeVerdict verdict = NodeVerdict::kHealthy;
  double mbps = 0;     // best bandwidth of its passing pairs (0: none passed)
  std::string reason;  // for faulty and straggler nodes: the evidence, one line
};

struct NetworkCheckReport {
  std::vector<NodeReport> nodes;  // in the order given to Evaluate
  std::vector<PairResult> pairs;  // round 0 then round 1, min bandwidth applied
  double median_mbps = 0;
  double straggler_below_mbps = 0;  // the threshold used (0: off)
  // False when some faulty node never had a healthy partner, i.e. the blame could not be
  // isolated (see above).
  bool isolated = true;

  std::vector<std::string> Faulty() const;
  std::vector<std::string> Stragglers() const;
};

// Round 0 for `nodes` (distinct ids, in rank order).
std::vector<CheckPair> PlanRound0(const std::vector<std::string>& nodes);

// Round 1 from the results of round 0 (one result per planned pair; a pair whose result is
// missing counts as failed).
std::vector<CheckPair> PlanRound1(const std::vector<std::string>& nodes,
                                  const std::vector<PairResult>& round0,
                                  const NetworkCheckOptions& options = {});

// The verdict for every node. `round1` may be empty (no suspects, or not run).
NetworkCheckReport Evaluate(const std::vector<std::string>& nodes,
                            const std::vector<PairResult>& round0,
                            const std::vector<PairResult>& round1,
                            const NetworkCheckOptions& options = {});

// The results table for the log: a header, one line per pair, one line per node, e.g.
//   round wave a      b      a->b MB/s  b->a MB/s  rtt ms  result
//   0     0    node0  node1     1180.4     1175.2   0.061  ok
//   ...
//   node0  1180.4 MB/s  healthy
std::vector<std::string> RenderTable(const NetworkCheckReport& report);

// The record for the event log: {"event":"network_check","isolated":..,"median_mbps":..,
// "pairs":[{"round","wave","a","b","ok","reason","mbps_ab","mbps_ba","rtt_ms"}],
// "nodes":[{"node","verdict","mbps","reason"}],"faulty":[..],"stragglers":[..]}.
JsonMessage ToJson(const NetworkCheckReport& report);

}  // namespace ftrun::rendezvous
