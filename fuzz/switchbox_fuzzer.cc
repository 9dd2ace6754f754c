// Fuzz target: the switchbox check's parsers (netcheck/switchbox.h). The input's first line is
// --box-pairs, the rest is a probe's stdout. For any input: no crash, no sanitizer report;
// accepted pairs are in range, distinct and never a GPU with itself; the parsed output has one
// result per expected pair, in order; the verdict and its summary line can be made.
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "fuzz/fuzz_support.h"
#include "launcher/netcheck/switchbox.h"

FTRUN_FUZZ_INITIALIZE()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ftrun::launcher;
  if (size > 65536) return -1;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  const std::string spec = input.substr(0, nl);
  const std::string probe_out = nl == std::string::npos ? "" : input.substr(nl + 1);

  auto pairs = ParseBoxPairs(spec);
  std::vector<BoxPair> expected;
  if (pairs) {
    std::set<std::pair<int, int>> seen;
    for (const auto& p : *pairs) {
      FTRUN_FUZZ_CHECK(p.a >= 0 && p.b >= 0 && p.a <= kMaxBoxGpuId && p.b <= kMaxBoxGpuId,
                       "a GPU out of range: " + p.Name());
      FTRUN_FUZZ_CHECK(p.a != p.b, "a GPU paired with itself: " + p.Name());
      FTRUN_FUZZ_CHECK(seen.insert({std::min(p.a, p.b), std::max(p.a, p.b)}).second,
                       "a pair given twice: " + p.Name());
      // The name reads back as the same pair (it is what the probe answers with).
      auto again = ParseBoxPairs(p.Name());
      FTRUN_FUZZ_CHECK(again && again->size() == 1 && (*again)[0] == p, "Name() " + p.Name());
    }
    FTRUN_FUZZ_CHECK(!pairs->empty(), "no pair accepted");
    expected = *pairs;
    (void)CheckSwitchboxSettings(expected, 100, 1);
    (void)ProbeArgv({"probe", "--a=${gpu_a}", "${pair}"}, expected.front());
  } else {
    FTRUN_FUZZ_CHECK(!pairs.error().message.empty(), "an error without a message");
    expected = {BoxPair{0, 1}, BoxPair{2, 4}};  // the probe output is worth parsing anyway
  }

  ParsedProbeOutput out = ParseProbeOutput(probe_out, expected);
  FTRUN_FUZZ_CHECK(out.pairs.size() == expected.size(), "one result per expected pair");
  for (size_t i = 0; i < expected.size(); ++i) {
    const BoxPairResult& r = out.pairs[i];
    FTRUN_FUZZ_CHECK(r.pair == expected[i], "results out of order");
    FTRUN_FUZZ_CHECK(r.ok ? (r.mbps >= 0 && r.mbps == r.mbps) : !r.reason.empty(),
                     "a result without a measurement or a reason");
  }
  SwitchboxReport report = JudgeSwitchbox(out.pairs, 1000, 1);
  FTRUN_FUZZ_CHECK(report.passed >= 0 && report.passed <= static_cast<int>(expected.size()),
                   "passed");
  (void)report.Summary();
  return 0;
}
