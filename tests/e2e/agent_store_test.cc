// The agent's c10d store with real torch (Debian's python3-torch, gloo): every operation of
// torch 1.13's TCPStore client against the agent, the process group formed through it, a
// hostile frame that closes only its own connection, and a restart on the same store and
// port. (Two agents on loopback: TorchE2E.TwoAgentsTimesTwoRanksAllReduce.)
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/e2e/torch_support.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

class AgentStoreE2E : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(DebianTorchAvailable()); }
  std::string Script() const { return SourceDir() + "/tests/e2e/workers/store_ops.py"; }
  std::map<std::string, std::string> Env() const { return {{"PYTHON_EXEC", kPython}}; }
  TempDir dir_;
};

TEST_F(AgentStoreE2E, EveryOperationOfATorchClientAndTheProcessGroup) {
  std::filesystem::create_directories(dir_ / "out");
  auto r = RunFtrun({"--nproc-per-node", "4", "--log-dir", dir_ / "logs", Script(), dir_ / "out"},
                    Env(), 120s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  double port = -1;
  for (int rank = 0; rank < 4; ++rank) {
    auto res = ReadJson(dir_ / ("out/store.0." + std::to_string(rank) + ".json"));
    if (port < 0) port = res.fields().at("master_port").number_value();
    EXPECT_EQ(res.fields().at("master_port").number_value(), port);
    EXPECT_GT(res.fields().at("init_seconds").number_value(), 0);
  }
  // The agent holds MASTER_PORT: a server of the script's own cannot bind it (as under
  // torchrun's static backend).
  auto rank0 = ReadJson(dir_ / "out/store.0.0.json");
  EXPECT_NE(rank0.fields().at("own_server").string_value().find("Address already in use"),
            std::string::npos);
  // The hostile frame: one bounded line, the job unharmed.
  EXPECT_NE(r.err.find("agent store: closed the connection from 127.0.0.1:"), std::string::npos);
  EXPECT_NE(r.err.find("GET with a key of 4611686018427387904 bytes"), std::string::npos) << r.err;
}

TEST_F(AgentStoreE2E, ARestartFormsTheGroupOnTheSameStoreAndPort) {
  std::filesystem::create_directories(dir_ / "out");
  auto r = RunFtrun({"--nproc-per-node", "4", "--max-restarts", "1", "--log-dir", dir_ / "logs",
                     Script(), dir_ / "out", "crash"},
                    Env(), 180s);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const double port =
      ReadJson(dir_ / "out/store.0.1.json").fields().at("master_port").number_value();
  for (int rank = 0; rank < 4; ++rank) {
    auto res = ReadJson(dir_ / ("out/store.1." + std::to_string(rank) + ".json"));
    EXPECT_EQ(res.fields().at("attempt").number_value(), 1);
    EXPECT_EQ(res.fields().at("master_port").number_value(), port) << "rank " << rank;
  }
  EXPECT_NE(r.err.find("attempt=1"), std::string::npos);
}

}  // namespace
}  // namespace ftrun::testing
