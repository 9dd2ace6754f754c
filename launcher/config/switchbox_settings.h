// The switchbox check's settings (--switchbox-check, --box-pairs, --min-bandwidth,
// --min-channels; launcher/netcheck/switchbox.h runs the check): the GPU pairs, their parsing
// and validation against the options and this node's GPUs. Pure apart from reading the GPU
// list. Errors name the option and the token.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/environment.h"
#include "common/result.h"

namespace ftrun::launcher {

inline constexpr const char* kDefaultBoxPairs = "0:1 2:4 3:5 6:7";
inline constexpr double kDefaultSwitchboxMinBandwidthMbps = 10000;
inline constexpr int kDefaultSwitchboxMinChannels = 2;
inline constexpr int kMaxBoxGpuId = 1023;

struct BoxPair {
  int a = 0;
  int b = 0;
  std::string Name() const;  // "A:B"
  bool operator==(const BoxPair&) const = default;
};

// "A:B" with decimal ids as a pair (range and A != B unchecked), or nullopt.
std::optional<BoxPair> ParseBoxPair(std::string_view token);

// "0:1 2:4 3:5 6:7" (separated by spaces or commas). Errors: a token that is not A:B with
// decimal ids 0..kMaxBoxGpuId, a GPU paired with itself, a pair given twice (in either
// order), or no pair at all; e.g. `--box-pairs: bad pair "2-4" (expected A:B)`.
Result<std::vector<BoxPair>> ParseBoxPairs(const std::string& text);
// The list as separate argv tokens (--box-pairs 0:1 2:4): joined by spaces, then as above.
Result<std::vector<BoxPair>> ParseBoxPairs(const std::vector<std::string>& tokens);

// --min-channels must be 1..pairs.size(); --min-bandwidth must be > 0.
Status CheckSwitchboxSettings(const std::vector<BoxPair>& pairs, double min_bandwidth_mbps,
                              int min_channels);

// For start-up: the node's GPU count (DetectHostFacts: NVIDIA GPUs in `nvidia_proc_dir`,
// honouring CUDA_VISIBLE_DEVICES), or an error when there is none or when a pair names a
// GPU the node does not have. Other vendors' GPUs are not seen here: skip this check there.
Result<int> CheckSwitchboxGpus(const EnvMap& env, const std::vector<BoxPair>& pairs,
                               const std::string& nvidia_proc_dir = "/proc/driver/nvidia/gpus");

}  // namespace ftrun::launcher
