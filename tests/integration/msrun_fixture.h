// The Msrun fixture and helpers shared by the msrun_*test.cc integration tests.
#pragma once

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "launcher/config/host.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {

inline std::string Standin() { return SourceDir() + "/tests/support/ms_standin/train.py"; }

// True if nothing listens on (or holds) the TCP port.
inline bool PortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A free port P with P+1 free too: msrun's scheduler takes P, ftrun's rendezvous P+1.
inline int FreePortPair() {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int p = TestPort();
    if (p < 65535 && PortFree(p + 1)) return p;
  }
  ADD_FAILURE() << "no two consecutive free ports";
  return 0;
}

// One process's --record file.
struct Record {
  std::string role;  // "scheduler" or "worker"
  pid_t pid = 0;
  std::map<std::string, std::string> env;
};

inline std::vector<Record> ReadRecords(const std::string& dir) {
  std::vector<Record> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    google::protobuf::Struct s;
    const std::string text = ReadFile(entry.path().string());
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &s).ok())
        << entry.path() << ": " << text;
    Record r;
    r.role = s.fields().at("role").string_value();
    r.pid = static_cast<pid_t>(s.fields().at("pid").number_value());
    for (const auto& [k, v] : s.fields().at("env").struct_value().fields()) {
      r.env[k] = v.string_value();
    }
    out.push_back(std::move(r));
  }
  return out;
}

inline std::vector<Record> OfRole(const std::vector<Record>& records, const std::string& role) {
  std::vector<Record> out;
  for (const auto& r : records) {
    if (r.role == role) out.push_back(r);
  }
  return out;
}

// Variables of the test's own environment that would blur what ftrun sets.
inline const std::vector<std::string> kUnset = {
    "MS_ENABLE_TFT",       "TTP_OT",        "TTP_NORMAL_ACTION_TIME_LIMIT",
    "MS_SIMULATION_LEVEL", "RANK_ID",       "RANK_SIZE",
    "DEVICE_ID",           "MS_NODE_ID",    "MS_ROLE",
    "RANK_TABLE_FILE",     "MSRUN_CPU_LIST"};

class Msrun : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = std::to_string(FreePortPair());
    std::filesystem::create_directories(rec_);
  }

  // msrun <options> --master_port P --log_dir <logs> train.py --record <rec> <script args>
  std::vector<std::string> Cmd(std::vector<std::string> options,
                               const std::vector<std::string>& script_args = {},
                               const std::string& rec = "", const std::string& logs = "") {
    std::vector<std::string> argv = {"msrun", "--master_port", port_, "--log_dir",
                                     logs.empty() ? logs_ : logs};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back(Standin());
    argv.push_back("--record");
    argv.push_back(rec.empty() ? rec_ : rec);
    argv.insert(argv.end(), script_args.begin(), script_args.end());
    return argv;
  }
  RunResult Run(const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& env = {},
                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    ChildRun run(FtrunBinary(), argv, env, kUnset);
    return run.Wait(timeout);
  }
  std::vector<Record> Records() const { return ReadRecords(rec_); }

  TempDir dir_;
  std::string port_;
  const std::string rec_ = dir_ / "rec";
  const std::string logs_ = dir_ / "logs";
};

}  // namespace ftrun::testing
