// What the FlashService tests share: a fixture that plays the workers' side of the control
// channel (requests in, answers and descriptors captured) on a loop the test drives, and a
// log sink that holds the persister's thread so a test can see a persist in progress.
#pragma once

#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/sink.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "ftrun/v1/control.pb.h"
#include "launcher/checkpoint/flash_service.h"
#include "tests/support/test_support.h"

namespace ftrun::launcher::testing {

// Where a committed snapshot goes, as a worker's commit says it.
struct Target {
  std::string root;
  std::string path;
  std::string tracker;
  int64_t world_size = 1;
  bool persist = false;
  std::string name = "";  // the shard's file name ("" : the default)
  std::string part_link = "";
};

// Holds every log record of another thread (the persister's: a debug line once it has written
// the checkpoint, before it lets go of the snapshot) until Open, so that the persist pins its
// buffer for as long as the test needs. The loop's own records pass. Gate() sets the launcher
// logger to debug while installed; without that line WaitReached times out rather than the test
// passing blind.
class GateSink : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg&) override {
    if (std::this_thread::get_id() == loop_) return;
    std::unique_lock lock(mutex_);
    reached_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
  }
  bool WaitReached() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [this] { return reached_; });
  }
  void Open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void flush() override {}
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}

 private:
  const std::thread::id loop_ = std::this_thread::get_id();
  std::mutex mutex_;
  std::condition_variable changed_;
  bool reached_ = false;
  bool open_ = false;
};

class FlashServiceTest : public ::testing::Test {
 protected:
  // One answer to a worker: its JSON object and the descriptor it carried (a copy, or -1).
  struct Sent {
    int local_rank = -1;
    google::protobuf::Struct json;
    int fd = -1;

    const google::protobuf::Value& at(const std::string& key) const {
      static const google::protobuf::Value kMissing;
      auto it = json.fields().find(key);
      return it == json.fields().end() ? kMissing : it->second;
    }
    std::string type() const { return at("type").string_value(); }
    std::string error() const { return at("error").string_value(); }
    bool flag(const std::string& key) const { return at(key).bool_value(); }
  };

  ~FlashServiceTest() override {
    if (gate_) gate_->Open();
    second_.reset();
    service_.reset();  // joins the persister's thread
    if (gate_) {
      std::erase(LauncherLog()->sinks(), gate_);
      LauncherLog()->set_level(level_before_gate_);
    }
    for (const Sent& s : sent_) {
      if (s.fd >= 0) ::close(s.fd);
    }
  }

  // The service the requests go to: the first agent's, or after UseSecond(true) another
  // agent's (of another node) on the same loop and answer list.
  FlashService& service() {
    if (second_agent_) {
      if (!second_) {
        second_.emplace(
            io_, 2, budget_, run_started_,
            [this](int lr, const std::string& json, int fd) { return Record(lr, json, fd); });
      }
      return *second_;
    }
    if (!service_) {
      service_.emplace(
          io_, 2, budget_, run_started_,
          [this](int lr, const std::string& json, int fd) { return Record(lr, json, fd); });
    }
    return *service_;
  }

  // Installs the GateSink. Before service(): the logger's sinks are not guarded, so no other
  // thread may be logging while they change.
  GateSink& Gate() {
    EXPECT_FALSE(service_) << "install the gate before the persister's thread starts";
    gate_ = std::make_shared<GateSink>();
    LauncherLog()->sinks().push_back(gate_);
    level_before_gate_ = LauncherLog()->level();
    LauncherLog()->set_level(spdlog::level::debug);
    return *gate_;
  }

  const Sent& Begin(int lr, int64_t step, int64_t bytes, const std::string& group = "") {
    v1::ControlSnapshotBegin r;
    r.set_id(++id_);
    r.set_step(step);
    r.set_bytes(bytes);
    r.set_group(group);
    service().Begin(lr, r);
    return sent_.back();
  }
  const Sent& Commit(int lr, int64_t step, const Target& to = {}) {
    v1::ControlSnapshotCommit r;
    r.set_id(++id_);
    r.set_step(step);
    r.set_root(to.root);
    r.set_path(to.path);
    r.set_tracker(to.tracker);
    r.set_name(to.name);
    r.set_part_link(to.part_link);
    r.set_world_size(to.world_size);
    r.set_persist(to.persist);
    service().Commit(lr, r);
    return sent_.back();
  }
  // A worker's whole save: the lease, `content` written through its descriptor, the commit.
  void Save(int lr, int64_t step, const std::string& content, const std::string& group = "",
            const Target& to = {}) {
    const Sent& lease = Begin(lr, step, static_cast<int64_t>(content.size()), group);
    ASSERT_EQ(lease.type(), "snapshot_lease") << lease.error();
    ASSERT_GE(lease.fd, 0);
    ASSERT_EQ(::pwrite(lease.fd, content.data(), content.size(), 0),
              static_cast<ssize_t>(content.size()));
    const Sent& committed = Commit(lr, step, to);
    ASSERT_EQ(committed.type(), "snapshot_committed");
    ASSERT_TRUE(committed.flag("ok")) << committed.error();
  }
  std::vector<int64_t> Steps(int lr, const std::string& group = "") {
    v1::ControlSnapshotSteps r;
    r.set_id(++id_);
    r.set_group(group);
    service().Steps(lr, r);
    std::vector<int64_t> steps;
    for (const auto& v : sent_.back().at("steps").list_value().values()) {
      steps.push_back(static_cast<int64_t>(v.number_value()));
    }
    return steps;
  }
  const Sent& GetAnswer(int lr, int64_t step, const std::string& group = "") {
    v1::ControlSnapshotGet r;
    r.set_id(++id_);
    r.set_step(step);
    r.set_group(group);
    const size_t before = sent_.size();
    service().Get(lr, r);  // answered once the bytes are checked, off the loop
    EXPECT_TRUE(RunUntil([&] { return sent_.size() > before; })) << "no answer to snapshot_get";
    return sent_.back();
  }
  // The bytes of the snapshot Get hands over, read through its descriptor.
  std::string Get(int lr, int64_t step, const std::string& group = "") {
    const Sent& got = GetAnswer(lr, step, group);
    if (got.type() != "snapshot" || got.fd < 0) return "refused: " + got.error();
    std::string bytes(static_cast<size_t>(got.at("bytes").number_value()), '\0');
    if (::pread(got.fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      return "short read";
    }
    return bytes;
  }
  // Runs the loop until `cond` holds (at most 10 s).
  bool RunUntil(const std::function<bool()>& cond) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!cond() && std::chrono::steady_clock::now() < deadline) {
      if (io_.stopped()) io_.restart();
      io_.run_one_for(std::chrono::milliseconds(50));
    }
    return cond();
  }
  bool Persisted() {
    return RunUntil([this] { return service().persists_in_flight() == 0; });
  }
  Target TargetIn(const std::string& name) {
    return {.root = dir_ / name, .path = dir_ / (name + ".link"), .tracker = "latest.txt"};
  }

  ftrun::testing::TempDir dir_;
  boost::asio::io_context io_;
  uint64_t budget_ = 64 << 20;
  bool connected_ = true;
  int64_t id_ = 0;
  std::deque<Sent> sent_;  // references stay valid as answers arrive
  std::shared_ptr<GateSink> gate_;
  spdlog::level::level_enum level_before_gate_ = spdlog::level::info;
  // When the service's run began: the epoch (the default) counts everything stored as this
  // run's; a test of what an earlier run left sets it before the service starts.
  std::chrono::system_clock::time_point run_started_{};
  std::optional<FlashService> service_;
  std::optional<FlashService> second_;
  bool second_agent_ = false;

  void UseSecond(bool second) { second_agent_ = second; }

 private:
  bool Record(int lr, const std::string& json, int fd) {
    Sent s{.local_rank = lr, .json = {}, .fd = fd >= 0 ? ::fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1};
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &s.json).ok()) << json;
    sent_.push_back(std::move(s));
    return connected_;
  }
};

}  // namespace ftrun::launcher::testing
