// fuzz_replay: runs the fuzz targets' inputs once each without libFuzzer, so that the seed
// corpora and every input a fuzzing run found (fuzz/regressions/<target>/) are regression
// tests of the ordinary build (ctest, with g++, and under scripts/sanitize.sh).
//   fuzz_replay <target> <file or directory> ...
// Each target's source is compiled with its LLVMFuzzer* entry points renamed (CMakeLists.txt).
// Exit status 0 when every input ran (a target reports a problem by aborting), 2 on usage.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// One X per fuzz target (clang-format does not settle on a layout for this list).
// clang-format off
#define FTRUN_FUZZ_TARGETS(X) \
  X(fuzz_torchrun_args)       \
  X(fuzz_dlrover_args)        \
  X(fuzz_msrun_args)          \
  X(fuzz_rdzv_conf)           \
  X(fuzz_control_channel)     \
  X(fuzz_file_timer)          \
  X(fuzz_rdzv_wire)           \
  X(fuzz_rdzv_state)          \
  X(fuzz_switchbox)           \
  X(fuzz_probe_wire)          \
  X(fuzz_store_wire)          \
  X(fuzz_lease_mailbox)       \
  X(fuzz_torch_file)
// clang-format on

#define FTRUN_DECLARE(name)                        \
  extern "C" int name##_Initialize(int*, char***); \
  extern "C" int name##_TestOneInput(const uint8_t*, size_t);
FTRUN_FUZZ_TARGETS(FTRUN_DECLARE)

namespace {

struct Target {
  const char* name;
  int (*initialize)(int*, char***);
  int (*test_one_input)(const uint8_t*, size_t);
};

#define FTRUN_ENTRY(name) {#name, name##_Initialize, name##_TestOneInput},
const Target kTargets[] = {FTRUN_FUZZ_TARGETS(FTRUN_ENTRY)};

std::vector<std::filesystem::path> InputsUnder(const std::filesystem::path& p) {
  std::vector<std::filesystem::path> out;
  if (std::filesystem::is_directory(p)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(p)) {
      if (e.is_regular_file()) out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
  } else {
    out.push_back(p);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Target* target = nullptr;
  for (const auto& t : kTargets) {
    if (argc > 1 && std::strcmp(argv[1], t.name) == 0) target = &t;
  }
  if (!target || argc < 3) {
    std::fprintf(stderr, "usage: fuzz_replay <target> <file or directory> ...; targets:");
    for (const auto& t : kTargets) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  target->initialize(&argc, &argv);
  size_t count = 0;
  for (int i = 2; i < argc; ++i) {
    if (!std::filesystem::exists(argv[i])) continue;  // e.g. no regression found yet
    for (const auto& path : InputsUnder(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      const std::vector<uint8_t> data{std::istreambuf_iterator<char>(in), {}};
      std::fprintf(stderr, "fuzz_replay: %s %s\n", target->name, path.c_str());
      target->test_one_input(data.data(), data.size());
      ++count;
    }
  }
  std::fprintf(stderr, "fuzz_replay: %s: %zu inputs ran\n", target->name, count);
  return count > 0 ? 0 : 2;
}
