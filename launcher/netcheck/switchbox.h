// Switchbox check (--switchbox-check, as in dlrover's MetaX fork; reference/dlrover.md §1, §3):
// per node, before the round starts, a probe measures the bandwidth between the two GPUs of
// each --box-pairs pair; a pair passes at >= --min-bandwidth MB/s (MB = 1e6 bytes) and the
// node passes when at least --min-channels pairs pass.
//
// The probe is a command (vendor tools differ). It runs once per pair, all pairs in parallel
// (a crash or hang then costs only its own pair), under one overall time limit. Its argv is
// the configured command with ${gpu_a}, ${gpu_b} and ${pair} substituted (Python
// string.Template rules, launcher/template.h); when the command uses none of them,
// "--pairs A:B" is appended. It prints, on stdout, one JSON object per line and per pair:
//   {"pair":"0:1","bandwidth_mbps":12345.6}
//   {"pair":"2:4","error":"cannot enable peer access"}
// "pair" is "A:B" (either order); "bandwidth_mbps" is a number >= 0; with "error" (a string)
// the pair failed. Other lines (blank lines aside) are garbage: ignored, and quoted in the
// reason of a pair that has no result. A probe that exits nonzero or by a signal fails its
// pair(s) with the exit description; one still running at the time limit is SIGKILLed (its
// whole process group) and its pair fails with "timed out after N s". The default probe is
// scripts/checks/switchbox_probe.py (torch.cuda peer copies).
//
// Thread: loop only. Errors: parsing returns usage errors naming the option and the token.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/environment.h"
#include "common/result.h"
#include "common/running_operation.h"
#include "launcher/config/switchbox_settings.h"

namespace ftrun::launcher {

// The outcome for one pair.
struct BoxPairResult {
  BoxPair pair;
  bool ok = false;  // measured (whatever the bandwidth)
  double mbps = 0;
  std::string reason;  // why there is no measurement
  bool Passes(double min_mbps) const { return ok && mbps >= min_mbps; }
};

struct ParsedProbeOutput {
  std::vector<BoxPairResult> pairs;  // one per expected pair, in the expected order
  std::vector<std::string> garbage;  // lines that were not a result for an expected pair
};

// Reads the probe's stdout. A pair with no line fails with reason "no result" (naming the
// first garbage line, if any); a second line for a pair is garbage.
ParsedProbeOutput ParseProbeOutput(const std::string& stdout_text,
                                   const std::vector<BoxPair>& expected);

struct SwitchboxReport {
  std::vector<BoxPairResult> pairs;  // in --box-pairs order
  double min_bandwidth_mbps = 0;
  int min_channels = 0;
  int passed = 0;  // pairs at >= min_bandwidth_mbps
  bool node_ok = false;

  // One line, e.g. "switchbox check failed: 1 of 4 GPU pairs reach 10000 MB/s (need 2);
  // 0:1 8123.4 MB/s; 2:4 timed out after 10 s; ...".
  std::string Summary() const;
};

// The verdict from per-pair results.
SwitchboxReport JudgeSwitchbox(std::vector<BoxPairResult> pairs, double min_bandwidth_mbps,
                               int min_channels);

struct SwitchboxOptions {
  std::vector<BoxPair> pairs;
  double min_bandwidth_mbps = kDefaultSwitchboxMinBandwidthMbps;
  int min_channels = kDefaultSwitchboxMinChannels;
  std::vector<std::string> probe_command;  // argv[0] is a path or a name found in env's PATH
  EnvMap env;                              // the probes' environment
  std::chrono::milliseconds time_limit{std::chrono::seconds(30)};  // for all pairs together
};

// Runs the probes. Ownership: the caller owns the object; destroying it early SIGKILLs the
// probes still running and drops the handler (the processes are reaped in the background).
class SwitchboxCheck {
 public:
  using Handler = std::function<void(SwitchboxReport)>;

  // Starts every probe. Errors (before anything runs): an empty command, or a program not
  // found. `done` runs once on the loop, never inside Start.
  static Result<std::unique_ptr<SwitchboxCheck>> Start(boost::asio::io_context& io,
                                                       SwitchboxOptions options, Handler done);

 private:
  struct State;
  explicit SwitchboxCheck(std::function<void()> abandon) : running_(std::move(abandon)) {}
  RunningOperation running_;  // destroying the check SIGKILLs the probes; `done` never runs
};

// The argv of the probe for one pair (see above).
std::vector<std::string> ProbeArgv(const std::vector<std::string>& command, const BoxPair& pair);

}  // namespace ftrun::launcher
