// A real torch.distributed (gloo) DDP job of 2 agents x 2 ranks whose rendezvous is a real
// etcd (the torchrun line `--rdzv-backend etcd --rdzv-endpoint host:port`), with a rank
// crashing once: the job restarts through etcd and ends with the same weights on every rank.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "tests/e2e/torch_support.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

TEST(EtcdTorchE2E, TwoNodesOfGlooRanksTrainThroughEtcd) {
  ASSERT_TRUE(DebianTorchAvailable());
  if (!EtcdCluster::Available()) GTEST_SKIP() << "etcd-server is not installed";
  EtcdCluster etcd(1);
  TempDir dir;
  std::vector<std::unique_ptr<ChildRun>> agents;
  for (int node = 0; node < 2; ++node) {
    agents.push_back(
        std::make_unique<ChildRun>(FtrunBinary(),
                                   std::vector<std::string>{"--nnodes",
                                                            "2",
                                                            "--nproc-per-node",
                                                            "2",
                                                            "--rdzv-backend",
                                                            "etcd",
                                                            "--rdzv-endpoint",
                                                            etcd.Endpoint(0),
                                                            "--rdzv-id",
                                                            "e2e",
                                                            "--rdzv-conf",
                                                            "last_call_timeout=1",
                                                            "--max-restarts",
                                                            "1",
                                                            "--log-dir",
                                                            dir / "logs",
                                                            SourceDir() + "/scripts/demo/train.py",
                                                            "--steps",
                                                            "20",
                                                            "--out",
                                                            dir / "out",
                                                            "--crash-rank",
                                                            "3",
                                                            "--crash-step",
                                                            "5"},
                                   std::map<std::string, std::string>{{"PYTHON_EXEC", kPython}}));
  }
  for (auto& a : agents) {
    auto r = a->Wait(240s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  const std::string digest =
      ReadJson(dir / "out/result.0.json").fields().at("checksum").string_value();
  for (int rank = 0; rank < 4; ++rank) {
    auto res = ReadJson(dir / ("out/result." + std::to_string(rank) + ".json"));
    EXPECT_EQ(res.fields().at("world_size").number_value(), 4);
    EXPECT_EQ(res.fields().at("steps").number_value(), 20);
    EXPECT_EQ(res.fields().at("checksum").string_value(), digest) << "replicas diverged";
    EXPECT_EQ(res.fields().at("attempt").number_value(), 1) << "one restart, through etcd";
  }
}

}  // namespace
}  // namespace ftrun::testing
