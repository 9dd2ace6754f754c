#include "launcher/netcheck/switchbox.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "tests/support/test_support.h"

namespace ftrun::launcher {
namespace {

using namespace std::chrono_literals;

std::vector<BoxPair> Pairs(const std::string& text) {
  auto r = ParseBoxPairs(text);
  EXPECT_TRUE(r) << r.error().message;
  return r ? *r : std::vector<BoxPair>{};
}

std::string ParseError(const std::string& text) {
  auto r = ParseBoxPairs(text);
  return r ? "(parsed)" : r.error().message;
}

TEST(BoxPairs, ParsesTheDefaultAndTokens) {
  std::vector<BoxPair> want = {{0, 1}, {2, 4}, {3, 5}, {6, 7}};
  EXPECT_EQ(Pairs(kDefaultBoxPairs), want);
  EXPECT_EQ(Pairs("  0:1,2:4\t3:5  6:7 "), want);
  auto tokens = ParseBoxPairs(std::vector<std::string>{"0:1", "2:4", "3:5 6:7"});
  ASSERT_TRUE(tokens);
  EXPECT_EQ(*tokens, want);
  EXPECT_EQ(want[1].Name(), "2:4");
  EXPECT_EQ(Pairs("1023:0"), (std::vector<BoxPair>{{1023, 0}}));
}

TEST(BoxPairs, BadPairsAreNamed) {
  const std::pair<const char*, const char*> kCases[] = {
      // Malformed tokens.
      {"0:1 2-4", "--box-pairs: bad pair \"2-4\" (expected A:B)"},
      {"0:1:2", "--box-pairs: bad pair \"0:1:2\" (expected A:B)"},
      {":1", "--box-pairs: bad pair \":1\" (expected A:B)"},
      {"a:b", "--box-pairs: bad pair \"a:b\" (expected A:B)"},
      {"-1:2", "--box-pairs: bad pair \"-1:2\" (expected A:B)"},
      {"+1:2", "--box-pairs: bad pair \"+1:2\" (expected A:B)"},
      {"1 :2", "--box-pairs: bad pair \"1\" (expected A:B)"},
      {"", "--box-pairs: no GPU pair given (expected e.g. \"0:1 2:4\")"},
      {" , ", "--box-pairs: no GPU pair given (expected e.g. \"0:1 2:4\")"},
      // Out of range, and duplicates.
      {"0:1024", "--box-pairs: GPU 1024 in \"0:1024\" is out of range (0-1023)"},
      {"0:99999999999", "--box-pairs: bad pair \"0:99999999999\" (expected A:B)"},
      {"3:3", "--box-pairs: pair \"3:3\" joins GPU 3 to itself"},
      {"0:1 2:3 0:1", "--box-pairs: pair \"0:1\" is given twice"},
      {"0:1 1:0", "--box-pairs: pair \"1:0\" is given twice"},
  };
  for (const auto& [text, message] : kCases) EXPECT_EQ(ParseError(text), message) << text;
  // A GPU may sit in two different pairs.
  EXPECT_EQ(Pairs("0:1 1:2").size(), 2u);
}

TEST(BoxPairs, Settings) {
  auto pairs = Pairs(kDefaultBoxPairs);
  EXPECT_TRUE(CheckSwitchboxSettings(pairs, kDefaultSwitchboxMinBandwidthMbps,
                                     kDefaultSwitchboxMinChannels));
  EXPECT_EQ(CheckSwitchboxSettings(pairs, 10000, 5).error().message,
            "--min-channels: needs 1 to 4 (the number of --box-pairs), got 5");
  EXPECT_EQ(CheckSwitchboxSettings(pairs, 10000, 0).error().message,
            "--min-channels: needs 1 to 4 (the number of --box-pairs), got 0");
  EXPECT_EQ(CheckSwitchboxSettings(pairs, 0, 2).error().message,
            "--min-bandwidth: needs a positive number of MB/s, got 0");
}

TEST(BoxPairs, GpuDetection) {
  testing::TempDir dir;
  std::string proc = dir / "gpus";
  std::filesystem::create_directories(proc);
  auto pairs = Pairs("0:1 2:3");
  auto none = CheckSwitchboxGpus({}, pairs, proc);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "--switchbox-check: this node has no GPU (nothing in " + proc +
                                      ", or CUDA_VISIBLE_DEVICES hides them all)");
  for (int i = 0; i < 4; ++i)
    std::filesystem::create_directories(proc + "/000" + std::to_string(i));
  auto four = CheckSwitchboxGpus({}, pairs, proc);
  ASSERT_TRUE(four) << four.error().message;
  EXPECT_EQ(*four, 4);
  auto hidden = CheckSwitchboxGpus({{"CUDA_VISIBLE_DEVICES", "0,1"}}, pairs, proc);
  ASSERT_FALSE(hidden);
  EXPECT_EQ(hidden.error().message,
            "--box-pairs: GPU 2 in \"2:3\" is out of range: this node has 2 GPU(s), 0-1");
}

TEST(ProbeOutput, GoodLinesInAnyOrder) {
  auto pairs = Pairs("0:1 2:4 3:5");
  auto out = ParseProbeOutput(
      "{\"pair\":\"2:4\",\"bandwidth_mbps\":15000.5}\n"
      "\n"
      "{\"pair\": \"1:0\", \"bandwidth_mbps\": 12000}\r\n"
      "{\"pair\":\"3:5\",\"error\":\"cannot enable peer access\"}",
      pairs);
  EXPECT_TRUE(out.garbage.empty());
  ASSERT_EQ(out.pairs.size(), 3u);
  EXPECT_TRUE(out.pairs[0].ok);
  EXPECT_EQ(out.pairs[0].pair, (BoxPair{0, 1}));
  EXPECT_DOUBLE_EQ(out.pairs[0].mbps, 12000);
  EXPECT_DOUBLE_EQ(out.pairs[1].mbps, 15000.5);
  EXPECT_FALSE(out.pairs[2].ok);
  EXPECT_EQ(out.pairs[2].reason, "cannot enable peer access");
}

TEST(ProbeOutput, GarbageIsIgnoredAndMissingPairsFail) {
  auto pairs = Pairs("0:1 2:4 3:5");
  auto out = ParseProbeOutput(
      "warming up...\n"
      "{\"pair\":\"0:1\",\"bandwidth_mbps\":11000}\n"
      "{\"pair\":\"0:1\",\"bandwidth_mbps\":1}\n"         // a second result: garbage
      "{\"pair\":\"6:7\",\"bandwidth_mbps\":11000}\n"     // not asked for
      "{\"pair\":\"2:4\",\"bandwidth_mbps\":\"fast\"}\n"  // not a number
      "{\"pair\":\"2:4\",\"bandwidth_mbps\":-5}\n"        // negative
      "[1,2]\n"
      "{\"pair\":\"2:4\",\"bandwidth_mbps\":11",  // cut off
      pairs);
  ASSERT_EQ(out.garbage.size(), 7u);
  EXPECT_EQ(out.garbage[0], "warming up...");
  EXPECT_TRUE(out.pairs[0].ok);
  EXPECT_DOUBLE_EQ(out.pairs[0].mbps, 11000);
  EXPECT_FALSE(out.pairs[1].ok);
  EXPECT_EQ(out.pairs[1].reason, "no result (the probe printed 'warming up...')");
  EXPECT_EQ(out.pairs[2].reason, "no result (the probe printed 'warming up...')");
  auto empty = ParseProbeOutput("", pairs);
  EXPECT_EQ(empty.pairs[0].reason, "no result");
}

TEST(ProbeOutput, ArgvTemplating) {
  EXPECT_EQ(ProbeArgv({"probe", "--bytes", "8"}, {2, 4}),
            (std::vector<std::string>{"probe", "--bytes", "8", "--pairs", "2:4"}));
  EXPECT_EQ(ProbeArgv({"tool", "-l", "${gpu_a}", "-p", "$gpu_b", "--tag=$pair"}, {2, 4}),
            (std::vector<std::string>{"tool", "-l", "2", "-p", "4", "--tag=2:4"}));
  EXPECT_EQ(ProbeArgv({"tool", "$$x"}, {0, 1}),
            (std::vector<std::string>{"tool", "$x", "--pairs", "0:1"}));
}

TEST(SwitchboxVerdict, NeedsMinChannelsAtMinBandwidth) {
  std::vector<BoxPairResult> r = {{{0, 1}, true, 10000, ""},
                                  {{2, 4}, true, 9999.9, ""},
                                  {{3, 5}, false, 0, "timed out after 10 s"},
                                  {{6, 7}, true, 20000, ""}};
  auto ok = JudgeSwitchbox(r, 10000, 2);
  EXPECT_TRUE(ok.node_ok);
  EXPECT_EQ(ok.passed, 2);
  auto bad = JudgeSwitchbox(r, 10000, 3);
  EXPECT_FALSE(bad.node_ok);
  EXPECT_EQ(bad.Summary(),
            "switchbox check failed: 2 of 4 GPU pairs reach 10000 MB/s (need 3); 0:1 10000.0 MB/s; "
            "2:4 9999.9 MB/s; 3:5 timed out after 10 s; 6:7 20000.0 MB/s");
}

// Runs a fake probe (a shell script) over the given pairs.
class SwitchboxRunTest : public ::testing::Test {
 protected:
  std::string Script(const std::string& name, const std::string& body) {
    std::string path = dir_ / name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
    return path;
  }

  SwitchboxReport RunProbe(const std::string& script, const std::string& pairs,
                           std::chrono::milliseconds limit = 5s, int min_channels = 2) {
    SwitchboxOptions o;
    o.pairs = Pairs(pairs);
    o.min_bandwidth_mbps = 10000;
    o.min_channels = min_channels;
    o.probe_command = {script, "--dir", dir_.path()};
    o.env = CurrentEnvironment();
    o.time_limit = limit;
    std::optional<SwitchboxReport> got;
    auto check = SwitchboxCheck::Start(io_, o, [&](SwitchboxReport r) { got = std::move(r); });
    EXPECT_TRUE(check) << check.error().message;
    if (!check) return {};
    EXPECT_TRUE(testing::WaitFor(
        [&] {
          io_.run_for(5ms);
          return got.has_value();
        },
        10s));
    return got.value_or(SwitchboxReport{});
  }

  testing::TempDir dir_;
  boost::asio::io_context io_;
};

// The fake probe's argv: --dir DIR --pairs A:B, so $4 is the pair.
TEST_F(SwitchboxRunTest, AllPairsPass) {
  auto s = Script("probe.sh", "echo '{\"pair\":\"'$4'\",\"bandwidth_mbps\":20000}'\n");
  auto t0 = std::chrono::steady_clock::now();
  auto r = RunProbe(s, kDefaultBoxPairs);
  EXPECT_TRUE(r.node_ok) << r.Summary();
  EXPECT_EQ(r.passed, 4);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST_F(SwitchboxRunTest, OnePairSlow) {
  auto s = Script("probe.sh",
                  "bw=20000; [ \"$4\" = 2:4 ] && bw=5000.5\n"
                  "echo '{\"pair\":\"'$4'\",\"bandwidth_mbps\":'$bw'}'\n");
  auto r = RunProbe(s, kDefaultBoxPairs, 5s, 4);
  EXPECT_FALSE(r.node_ok);
  EXPECT_EQ(r.passed, 3);
  EXPECT_TRUE(r.pairs[1].ok);
  EXPECT_DOUBLE_EQ(r.pairs[1].mbps, 5000.5);
  EXPECT_NE(r.Summary().find("2:4 5000.5 MB/s"), std::string::npos) << r.Summary();
  EXPECT_TRUE(JudgeSwitchbox(r.pairs, 10000, 3).node_ok);
}

TEST_F(SwitchboxRunTest, GarbageOutput) {
  auto s =
      Script("probe.sh",
             "if [ \"$4\" = 0:1 ]; then echo 'Segmentation fault? no, just noise'; exit 0; fi\n"
             "echo '{\"pair\":\"'$4'\",\"bandwidth_mbps\":20000}'\n");
  auto r = RunProbe(s, "0:1 2:4", 5s, 1);
  EXPECT_TRUE(r.node_ok) << r.Summary();
  EXPECT_EQ(r.passed, 1);
  EXPECT_FALSE(r.pairs[0].ok);
  EXPECT_EQ(r.pairs[0].reason,
            "no result (the probe printed 'Segmentation fault? no, just noise')");
  EXPECT_FALSE(JudgeSwitchbox(r.pairs, 10000, 2).node_ok);
}

TEST_F(SwitchboxRunTest, HangIsKilledAtTheLimit) {
  auto s = Script("probe.sh",
                  "echo $$ > \"$2/pid.$4\"\n"
                  "if [ \"$4\" = 3:5 ]; then sleep 30; fi\n"
                  "echo '{\"pair\":\"'$4'\",\"bandwidth_mbps\":20000}'\n");
  auto t0 = std::chrono::steady_clock::now();
  auto r = RunProbe(s, kDefaultBoxPairs, 500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_TRUE(r.node_ok);
  EXPECT_EQ(r.passed, 3);
  EXPECT_FALSE(r.pairs[2].ok);
  EXPECT_EQ(r.pairs[2].reason, "timed out after 0.5 s");
  pid_t pid = testing::ReadPid(dir_ / "pid.3:5");
  EXPECT_FALSE(testing::ProcessAlive(pid));
}

TEST_F(SwitchboxRunTest, CrashAndErrorExit) {
  auto s = Script("probe.sh",
                  "case \"$4\" in\n"
                  "  0:1) kill -SEGV $$ ;;\n"
                  "  2:4) echo '{\"pair\":\"2:4\",\"error\":\"no CUDA device\"}'; exit 2 ;;\n"
                  "  3:5) echo '{\"pair\":\"3:5\",\"bandwidth_mbps\":20000}'; exit 3 ;;\n"
                  "esac\n"
                  "echo '{\"pair\":\"'$4'\",\"bandwidth_mbps\":20000}'\n");
  auto r = RunProbe(s, kDefaultBoxPairs);
  EXPECT_FALSE(r.node_ok);
  EXPECT_EQ(r.passed, 1);
  EXPECT_EQ(r.pairs[0].reason, "probe ended with signal 11 (SIGSEGV)");
  EXPECT_EQ(r.pairs[1].reason, "probe ended with exit code 2: no CUDA device");
  EXPECT_EQ(r.pairs[2].reason, "probe ended with exit code 3");
}

TEST_F(SwitchboxRunTest, StartErrors) {
  SwitchboxOptions o;
  o.pairs = Pairs("0:1");
  o.env = CurrentEnvironment();
  auto empty = SwitchboxCheck::Start(io_, o, [](SwitchboxReport) {});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().message, "--switchbox-probe: no command given");
  o.probe_command = {"no-such-probe-xyz"};
  auto missing = SwitchboxCheck::Start(io_, o, [](SwitchboxReport) {});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "--switchbox-probe: 'no-such-probe-xyz' not found in PATH");
  std::string not_exec = dir_ / "plain.txt";
  std::ofstream(not_exec) << "x";
  o.probe_command = {not_exec};
  auto denied = SwitchboxCheck::Start(io_, o, [](SwitchboxReport) {});
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().message,
            "--switchbox-probe: cannot run '" + not_exec + "': Permission denied");
}

TEST_F(SwitchboxRunTest, DestroyingTheCheckKillsTheProbes) {
  auto s = Script("probe.sh", "echo $$ > \"$2/pid.$4\"\nsleep 30\n");
  SwitchboxOptions o;
  o.pairs = Pairs("0:1");
  o.probe_command = {s, "--dir", dir_.path()};
  o.env = CurrentEnvironment();
  int calls = 0;
  auto check = SwitchboxCheck::Start(io_, o, [&](SwitchboxReport) { ++calls; });
  ASSERT_TRUE(check);
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        io_.run_for(5ms);
        return testing::FileExists(dir_ / "pid.0:1") && testing::ReadPid(dir_ / "pid.0:1") > 0;
      },
      5s));
  pid_t pid = testing::ReadPid(dir_ / "pid.0:1");
  check->reset();
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        io_.run_for(5ms);
        return !testing::ProcessAlive(pid);
      },
      5s));
  io_.run_for(20ms);
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace ftrun::launcher
