// The flash-checkpoint replica channel of real agents (`ftrun master` and two ftrun agents
// with fake workers on loopback): each agent listens on the address it reports, and a copy
// from anyone without the round's replica key is refused before anything is stored, with one
// bounded log line.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "ftrun/v1/replica.grpc.pb.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

using namespace std::chrono_literals;

grpc::Status Push(const std::string& target, const std::string& key, bool header = true) {
  auto stub = v1::Replica::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::ReplicaAck ack;
  auto writer = stub->Push(&ctx, &ack);
  v1::ReplicaChunk chunk;
  if (header) {
    chunk.mutable_header()->set_key(key);
    chunk.mutable_header()->set_group("rank-0");
    chunk.mutable_header()->set_step(7);
    chunk.mutable_header()->set_bytes(4);
  }
  chunk.set_data("evil");
  chunk.set_last(true);
  writer->Write(chunk);
  writer->WritesDone();
  return writer->Finish();
}

TEST(ReplicaTrust, ACopyWithoutTheRoundsKeyIsRefusedByARealAgent) {
  TempDir dir;
  const std::string port = std::to_string(TestPort());
  const std::string conf = "last_call_timeout=0.5";
  ChildRun master(FtrunBinary(), {"master", "--port", port, "--nnodes", "2", "--rdzv-id", "job",
                                  "--rdzv-conf", conf});
  ASSERT_TRUE(WaitFor([&] { return master.Err().find("listening") != std::string::npos; }, 10s))
      << master.Err();
  auto agent = [&] {
    return std::make_unique<ChildRun>(
        FtrunBinary(), FakeWorkerJob({"--log-dir", dir / "logs", "--nproc-per-node", "1"},
                                     {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                      "127.0.0.1:" + port, "--rdzv-id", "job", "--rdzv-conf",
                                      conf + ",is_host=0", "--local-addr", "127.0.0.1"},
                                     {"wait-file", dir / "go"}));
  };
  auto a = agent(), b = agent();
  ASSERT_TRUE(WaitFor(
      [&] {
        return a->Err().find("round started") != std::string::npos &&
               b->Err().find("round started") != std::string::npos;
      },
      30s))
      << a->Err() << b->Err();
  // Each agent listens on the address it reports to the rendezvous, on a port of its own.
  std::smatch m;
  const std::string err = a->Err();
  ASSERT_TRUE(
      std::regex_search(err, m, std::regex(R"(replica service listening addr=(\S+):(\d+))")))
      << err;
  EXPECT_EQ(m[1].str(), "127.0.0.1");
  const std::string target = "127.0.0.1:" + m[2].str();
  EXPECT_NE(b->Err().find("replicas: round=0 copies=2 targets=[" + target + "]"), std::string::npos)
      << b->Err();

  const std::string forged = "forged-" + std::string(100, 'k');
  EXPECT_EQ(Push(target, forged).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Push(target, "").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Push(target, std::string(10000, 'x')).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Push(target, "", false).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(WaitFor(
      [&] { return a->Err().find("refused: wrong replica key") != std::string::npos; }, 10s));
  // One bounded line per refusal: the peer's address and why, never what it sent.
  EXPECT_EQ(a->Err().find(forged), std::string::npos);
  EXPECT_EQ(a->Err().find("xxxxxxxxxx"), std::string::npos);
  EXPECT_EQ(a->Err().find("evil"), std::string::npos);

  std::ofstream(dir / "go") << "go";
  EXPECT_EQ(a->Wait(30s).exit_code, 0) << a->Err();
  EXPECT_EQ(b->Wait(30s).exit_code, 0) << b->Err();
  master.Wait(30s);
}

}  // namespace
}  // namespace ftrun::testing
