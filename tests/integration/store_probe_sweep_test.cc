// The partition check's sweep on a suspected hang, end to end: a job-wide stack dump (here
// `ftrun status --stacks`, as --hang-timeout orders one) reaches every member through its view,
// and each member's agent then checks every other member's store at once (StoreProbe::Sweep).
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

TEST(StoreProbeSweep, AJobWideStackDumpMakesEveryMemberCheckEveryStore) {
  TempDir dir;
  const std::string endpoint = "127.0.0.1:" + std::to_string(TestPort());
  std::vector<std::unique_ptr<ChildRun>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<ChildRun>(
        FtrunBinary(),
        std::vector<std::string>{"--nnodes",         "2",
                                 "--nproc-per-node", "1",
                                 "--rdzv-backend",   "c10d",
                                 "--rdzv-endpoint",  endpoint,
                                 "--rdzv-id",        "sweep",
                                 "--rdzv-conf",      "last_call_timeout=0.5",
                                 "--log-dir",        dir / ("logs" + std::to_string(i)),
                                 "--no-python",      FakeWorkerBinary(),
                                 "record",           dir / "records",
                                 "wait-file",        dir / "go"}));
    ChildRun& a = *agents.back();
    ASSERT_TRUE(WaitFor([&] { return a.Err().find("joined the job") != std::string::npos; }, 20s))
        << a.Err();
  }
  ASSERT_TRUE(WaitFor([&] { return Lines(ReadFile(dir / "records")).size() == 2; }, 30s))
      << agents[0]->Err() << agents[1]->Err();
  const std::string swept =
      "partition check: a job-wide stack dump (a suspected hang): checking "
      "the stores of all 1 other member(s) now";
  for (const auto& a : agents) EXPECT_EQ(a->Err().find(swept), std::string::npos) << a->Err();
  auto status = RunFtrun({"status", endpoint, "--stacks"}, {}, 60s);
  EXPECT_FALSE(status.timed_out) << status.err;
  for (const auto& a : agents) {
    EXPECT_TRUE(WaitFor([&] { return a->Err().find(swept) != std::string::npos; }, 20s))
        << a->Err();
  }
  std::ofstream(dir / "go") << "";
  for (const auto& a : agents) {
    auto r = a->Wait(60s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const size_t first = r.err.find(swept);
    ASSERT_NE(first, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(swept, first + 1), std::string::npos) << "one sweep per dump: " << r.err;
    EXPECT_EQ(r.err.find("cannot reach group rank"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace ftrun::testing
