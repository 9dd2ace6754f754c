// What operators see: the event log, the Prometheus endpoint, `ftrun status`, --dry-run.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fstream>
#include <regex>

#include "launcher/config/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {
namespace {

namespace pb = google::protobuf;
using namespace std::chrono_literals;

std::vector<pb::Struct> ReadEvents(const std::string& path) {
  std::vector<pb::Struct> out;
  for (const auto& line : Lines(ReadFile(path))) {
    pb::Struct s;
    EXPECT_TRUE(pb::util::JsonStringToMessage(line, &s).ok()) << line;
    out.push_back(s);
  }
  return out;
}

std::string Str(const pb::Struct& s, const std::string& k) {
  auto it = s.fields().find(k);
  if (it == s.fields().end()) return "<unset>";
  return it->second.has_string_value() ? it->second.string_value()
                                       : std::to_string(it->second.number_value());
}

std::string HttpGet(int port, const std::string& path) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket s(io);
  s.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  boost::asio::write(s, boost::asio::buffer(req));
  std::string reply;
  boost::system::error_code ec;
  boost::asio::read(s, boost::asio::dynamic_buffer(reply), ec);
  return reply;
}

int PortFromLog(const std::string& err) {
  std::smatch m;
  static const std::regex re("metrics at http://[^:]+:([0-9]+)/metrics");
  return std::regex_search(err, m, re) ? std::stoi(m[1]) : 0;
}

class Operations : public ::testing::Test {
 protected:
  std::vector<std::string> Worker(std::vector<std::string> actions) {
    std::vector<std::string> a = {"--no-python", FakeWorkerBinary()};
    a.insert(a.end(), actions.begin(), actions.end());
    return a;
  }
  TempDir dir_;
};

TEST_F(Operations, EventLogRecordsTheLifecycle) {
  std::vector<std::string> argv = {
      "--log-dir", dir_ / "logs",    "--event-log", dir_ / "ev.jsonl", "--nproc-per-node",
      "2",         "--max-restarts", "1",           "--rdzv-id",       "evjob"};
  auto w = Worker({"if-attempt", "0", "if-rank", "1", "exit", "3", "exit", "0"});
  argv.insert(argv.end(), w.begin(), w.end());
  auto r = RunFtrun(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto events = ReadEvents(dir_ / "ev.jsonl");
  std::vector<std::string> names;
  for (const auto& e : events) {
    names.push_back(Str(e, "event"));
    EXPECT_EQ(Str(e, "schema"), "1.000000");
    EXPECT_EQ(Str(e, "run_id"), "evjob");
    EXPECT_NE(Str(e, "node"), "<unset>");
    EXPECT_TRUE(
        std::regex_match(Str(e, "time"), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
  }
  const std::vector<std::string> expected = {"agent_started", "round_started",  "workers_spawned",
                                             "worker_exited", "fault_reported", "restart",
                                             "round_started", "job_finished"};
  size_t at = 0;
  for (const auto& n : names) {
    if (at < expected.size() && n == expected[at]) ++at;
  }
  EXPECT_EQ(at, expected.size()) << "events in order, got: " << ReadFile(dir_ / "ev.jsonl");
  const auto& last = events.back();
  EXPECT_EQ(Str(last, "outcome"), "succeeded");
  for (const auto& e : events) {
    if (Str(e, "event") == "restart") {
      EXPECT_EQ(Str(e, "restart_count"), "1.000000");
      EXPECT_NE(Str(e, "reason").find("worker rank 1"), std::string::npos);
    }
  }
}

TEST_F(Operations, EventLogThatCannotBeOpenedIsOneLine) {
  auto argv = Worker({"exit", "0"});
  argv.insert(argv.begin(), {"--event-log", "/nonexistent/dir/ev.jsonl"});
  auto r = RunFtrun(argv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--event-log: cannot open /nonexistent/dir/ev.jsonl"), std::string::npos)
      << r.err;
}

TEST_F(Operations, MetricsEndpoint) {
  auto argv = Worker({"pidfile", dir_.path(), "sleep", "30"});
  argv.insert(argv.begin(),
              {"--log-dir", dir_ / "logs", "--metrics-port", "0", "--nproc-per-node", "2"});
  ChildRun run(FtrunBinary(), argv);
  ASSERT_TRUE(WaitFor([&] { return PortFromLog(run.Err()) > 0 && ReadPid(dir_ / "1.pid"); }, 10s));
  const int port = PortFromLog(run.Err());
  std::string body;
  ASSERT_TRUE(WaitFor(
      [&] {
        body = HttpGet(port, "/metrics");
        return body.find("ftrun_workers_live 2") != std::string::npos;
      },
      10s))
      << body;
  EXPECT_NE(body.find("HTTP/1.1 200 OK"), std::string::npos);
  EXPECT_NE(body.find("# TYPE ftrun_restarts gauge"), std::string::npos);
  EXPECT_NE(body.find("ftrun_info{version=\"0.1.0\",run_id=\"none\"} 1"), std::string::npos);
  EXPECT_NE(body.find("ftrun_world_size 2"), std::string::npos);
  EXPECT_NE(HttpGet(port, "/nope").find("404 Not Found"), std::string::npos);
  run.Signal(SIGTERM);
  EXPECT_EQ(run.Wait(20s).exit_code, 1);
}

TEST_F(Operations, MasterWithEventLogMetricsAndStatus) {
  const std::string port = std::to_string(TestPort());
  ChildRun master(FtrunBinary(),
                  {"master", "--port", port, "--nnodes", "2", "--rdzv-id", "sj", "--event-log",
                   dir_ / "master.jsonl", "--metrics-port", "0", "--rdzv-conf", "token=t0k"});
  ASSERT_TRUE(WaitFor([&] { return PortFromLog(master.Err()) > 0; }, 10s)) << master.Err();
  auto agent = [&] {
    auto argv = Worker({"wait-file", dir_ / "done"});
    argv.insert(argv.begin(), {"--log-dir", dir_ / "logs", "--nnodes", "2", "--nproc-per-node", "2",
                               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + port,
                               "--rdzv-id", "sj", "--rdzv-conf", "token=t0k"});
    return std::make_unique<ChildRun>(FtrunBinary(), argv);
  };
  auto a = agent(), b = agent();
  RunResult st;
  ASSERT_TRUE(WaitFor(
      [&] {
        st = RunFtrun({"status", "--token", "t0k", "127.0.0.1:" + port});
        return st.out.find("job sj: running") != std::string::npos;
      },
      20s))
      << st.out << st.err;
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_NE(st.out.find("world size 4"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("0-1"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("2-3"), std::string::npos) << st.out;
  auto js = RunFtrun({"status", "--json", "--token", "t0k", "127.0.0.1:" + port});
  pb::Struct parsed;
  EXPECT_TRUE(pb::util::JsonStringToMessage(js.out, &parsed).ok()) << js.out;
  EXPECT_EQ(parsed.fields().at("nodes").list_value().values_size(), 2);
  auto denied = RunFtrun({"status", "127.0.0.1:" + port});
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.err.find("wrong job token"), std::string::npos) << denied.err;
  auto metrics = HttpGet(PortFromLog(master.Err()), "/metrics");
  EXPECT_NE(metrics.find("ftrun_rendezvous_nodes 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ftrun_rendezvous_phase{phase=\"running\"} 1"), std::string::npos);
  std::ofstream(dir_ / "done") << "";
  EXPECT_EQ(a->Wait(30s).exit_code, 0);
  EXPECT_EQ(b->Wait(30s).exit_code, 0);
  EXPECT_EQ(master.Wait(30s).exit_code, 0);
  std::vector<std::string> names;
  for (const auto& e : ReadEvents(dir_ / "master.jsonl")) names.push_back(Str(e, "event"));
  for (const char* want : {"node_joined", "round_formed", "job_finished"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

TEST_F(Operations, StatusOfNothingIsOneLine) {
  const std::string port = std::to_string(TestPort());
  auto r = RunFtrun({"status", "--timeout", "1", "127.0.0.1:" + port});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:" + port), std::string::npos) << r.err;
  EXPECT_EQ(RunFtrun({"status"}).exit_code, 2);
}

TEST_F(Operations, DryRunStartsNothing) {
  auto r = RunFtrun({"--dry-run", "--nnodes", "2:4", "--nproc-per-node", "8", "--rdzv-backend",
                     "c10d", "--rdzv-endpoint", "node0:29400", "--rdzv-id", "job42",
                     "--max-restarts", "3", "--log-dir", dir_ / "logs", "train.py", "--lr", "0.1"},
                    {{"TMPDIR", dir_.path()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("the command line is valid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("c10d (ftrun) at node0:29400, run id job42"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-u train.py --lr 0.1"), std::string::npos) << r.out;
  EXPECT_FALSE(FileExists(dir_ / "logs")) << "nothing is created";
  EXPECT_EQ(RunFtrun({"--dry-run", "--nnodes", "0", "train.py"}).exit_code, 2);
}

}  // namespace
}  // namespace ftrun::testing
