#include "launcher/channels/control_server.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>

#include "common/log.h"

namespace ftrun::launcher {
namespace {

namespace pb = google::protobuf;
using stream = boost::asio::local::stream_protocol;

const pb::Value* Field(const pb::Struct& s, const char* key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

// Reads an optional typed field; a present field of the wrong type is an error.
bool GetBool(const pb::Struct& s, const char* key, bool* out, std::string* err) {
  const pb::Value* v = Field(s, key);
  if (!v) return true;
  if (!v->has_bool_value()) return *err = std::string("'") + key + "' must be true or false", false;
  *out = v->bool_value();
  return true;
}
bool GetString(const pb::Struct& s, const char* key, std::string* out, std::string* err) {
  const pb::Value* v = Field(s, key);
  if (!v) return true;
  if (!v->has_string_value()) return *err = std::string("'") + key + "' must be a string", false;
  *out = v->string_value();
  return true;
}
bool GetInt(const pb::Struct& s, const char* key, int64_t* out, std::string* err) {
  const pb::Value* v = Field(s, key);
  if (!v) return true;
  double d = v->has_number_value() ? v->number_value() : NAN;
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) {
    return *err = std::string("'") + key + "' must be an integer", false;
  }
  *out = static_cast<int64_t>(d);
  return true;
}

}  // namespace

struct ControlServer::Connection {
  explicit Connection(boost::asio::io_context& io) : socket(io), in(kMaxControlLine + 1) {}
  stream::socket socket;
  boost::asio::streambuf in;
  std::deque<std::string> out;
  bool writing = false;
  bool closed = false;
  int local_rank = -1;  // -1 until "hello"
  pid_t peer_pid = 0;
};

ControlServer::ControlServer(boost::asio::io_context& io, Events events)
    : io_(io), events_(std::move(events)) {}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start(const std::string& tmp_root) {
  std::string tmpl = (std::filesystem::path(tmp_root) / "ftrun-control-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {  // mkdtemp creates it 0700
    return Error{"cannot create the control directory in " + tmp_root + ": " +
                 std::strerror(errno)};
  }
  dir_ = tmpl;
  path_ = dir_ + "/agent.sock";
  boost::system::error_code ec;
  acceptor_ = std::make_unique<stream::acceptor>(io_);
  acceptor_->open(stream(), ec);
  if (!ec) acceptor_->bind(stream::endpoint(path_), ec);
  if (!ec) acceptor_->listen(64, ec);
  if (ec) return Error{"cannot listen on " + path_ + ": " + ec.message()};
  ::fcntl(acceptor_->native_handle(), F_SETFD, FD_CLOEXEC);
  Accept();
  return {};
}

void ControlServer::Stop() {
  if (!*alive_) return;
  *alive_ = false;
  boost::system::error_code ec;
  if (acceptor_) acceptor_->close(ec);
  for (auto& c : connections_) c->socket.close(ec);
  connections_.clear();
  by_rank_.clear();
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

void ControlServer::SetWorkers(const std::vector<pid_t>& pids, int base_rank, int attempt) {
  auto old = connections_;  // Close() edits both containers
  for (auto& c : old) Close(c, "a new attempt started");
  by_rank_.clear();
  pids_ = pids;
  base_rank_ = base_rank;
  attempt_ = attempt;
  ranks_.assign(pids.size(), RankControl{});
}

const RankControl& ControlServer::rank(int local_rank) const { return ranks_.at(local_rank); }

int ControlServer::RankOfPeer(pid_t pid) const {
  const pid_t pgid = ::getpgid(pid);
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] > 0 && pids_[i] == pgid) return static_cast<int>(i);
  }
  return -1;
}

void ControlServer::Accept() {
  auto c = std::make_shared<Connection>(io_);
  std::weak_ptr<bool> alive = alive_;
  acceptor_->async_accept(c->socket, [this, alive, c](const boost::system::error_code& ec) {
    auto a = alive.lock();
    if (!a || !*a) return;
    if (!ec) {
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(c->socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->peer_pid = cred.pid;
      }
      connections_.push_back(c);
      Read(c);
    }
    Accept();
  });
}

void ControlServer::Read(std::shared_ptr<Connection> c) {
  std::weak_ptr<bool> alive = alive_;
  boost::asio::async_read_until(
      c->socket, c->in, '\n', [this, alive, c](const boost::system::error_code& ec, size_t n) {
        auto a = alive.lock();
        if (!a || !*a || c->closed) return;
        if (ec == boost::asio::error::not_found) return Close(c, "message over 64 KiB");
        if (ec) return Close(c, "");  // the worker closed it (or exited)
        std::string line(boost::asio::buffers_begin(c->in.data()),
                         boost::asio::buffers_begin(c->in.data()) + n - 1);
        c->in.consume(n);
        if (std::string err = Handle(*c, line); !err.empty()) return Close(c, err);
        Read(c);
      });
}

bool ControlServer::Send(int local_rank, const std::string& json) {
  auto it = by_rank_.find(local_rank);
  if (it == by_rank_.end() || it->second->closed) return false;
  it->second->out.push_back(json + "\n");
  Write(it->second);
  return true;
}

void ControlServer::Write(std::shared_ptr<Connection> c) {
  if (c->writing || c->out.empty() || c->closed) return;
  c->writing = true;
  std::weak_ptr<bool> alive = alive_;
  boost::asio::async_write(c->socket, boost::asio::buffer(c->out.front()),
                           [this, alive, c](const boost::system::error_code& ec, size_t) {
                             auto a = alive.lock();
                             if (!a || !*a) return;
                             c->writing = false;
                             if (ec) return Close(c, "");
                             c->out.pop_front();
                             Write(c);
                           });
}

void ControlServer::Close(const std::shared_ptr<Connection>& c, const std::string& why) {
  if (c->closed) return;
  c->closed = true;
  if (!why.empty()) {
    WorkerLog()->warn(
        "control channel: closing the connection of {} (pid {}): {}",
        c->local_rank >= 0 ? "local_rank " + std::to_string(c->local_rank) : "a process",
        c->peer_pid, why);
    // Best effort, synchronously: the peer learns why before the connection goes.
    std::string line = JsonMessage("error").Set("message", why).str() + "\n";
    boost::system::error_code ec;
    c->socket.non_blocking(true, ec);
    c->socket.write_some(boost::asio::buffer(line), ec);
  }
  boost::system::error_code ec;
  c->socket.close(ec);
  if (c->local_rank >= 0) {
    auto it = by_rank_.find(c->local_rank);
    if (it != by_rank_.end() && it->second == c) {
      by_rank_.erase(it);
      if (c->local_rank < static_cast<int>(ranks_.size())) ranks_[c->local_rank].connected = false;
    }
  }
  std::erase(connections_, c);
}

std::string ControlServer::Handle(Connection& c, const std::string& line) {
  pb::Struct msg;
  if (!pb::util::JsonStringToMessage(line, &msg).ok()) return "not a JSON object";
  std::string type, err;
  if (!GetString(msg, "type", &type, &err)) return err;
  if (type.empty()) return "message without a 'type'";
  if (c.local_rank < 0) {
    if (type != "hello") return "the first message must be 'hello', not '" + type + "'";
    int64_t version = 0, rank = -1;
    if (!GetInt(msg, "version", &version, &err) || !GetInt(msg, "rank", &rank, &err)) return err;
    if (version != kControlProtocolVersion) {
      return "protocol version " + std::to_string(version) +
             " is not supported (this agent "
             "speaks " +
             std::to_string(kControlProtocolVersion) + ")";
    }
    const int lr = RankOfPeer(c.peer_pid);
    if (lr < 0) return "pid " + std::to_string(c.peer_pid) + " is not one of this agent's workers";
    if (rank != base_rank_ + lr) {
      return "says rank " + std::to_string(rank) + " but is rank " +
             std::to_string(base_rank_ + lr);
    }
    for (auto& other : connections_) {
      if (other.get() != &c && other->local_rank == lr) {
        Close(other, "replaced by a new connection of the same rank");
        break;
      }
    }
    c.local_rank = lr;
    for (auto& sp : connections_) {
      if (sp.get() == &c) by_rank_[lr] = sp;
    }
    ranks_[lr].connected = true;
    Send(lr, JsonMessage("welcome")
                 .Set("version", int64_t{kControlProtocolVersion})
                 .Set("rank", rank)
                 .Set("attempt", int64_t{attempt_})
                 .str());
  }
  RankControl& rc = ranks_[c.local_rank];
  if (type == "hello" || type == "handler" || type == "group") {
    bool enabled = rc.has_handler;
    if (!GetBool(msg, type == "handler" ? "enabled" : "handler", &enabled, &err)) return err;
    std::string group = rc.group;
    if (!GetString(msg, "group", &group, &err)) return err;
    if (group.size() > 1024) return "replica group name over 1 KiB";
    rc.has_handler = enabled;
    rc.group = group;
  } else if (type == "progress") {
    int64_t step = -1;
    bool updating = false;
    if (!Field(msg, "step")) return "'progress' without 'step'";
    if (!GetInt(msg, "step", &step, &err) || !GetBool(msg, "updating", &updating, &err)) return err;
    rc.step = step;
    rc.updating = updating;
    rc.progress_seen = true;
    rc.last_progress = std::chrono::steady_clock::now();
  } else if (type == "finished") {
    rc.finished = true;
  } else if (type == "peer_failed") {
    std::string error;
    if (!GetString(msg, "error", &error, &err)) return err;
    rc.peer_failed = true;
    if (events_.on_peer_failed) events_.on_peer_failed(c.local_rank, error);
  } else if (type == "saved") {
    int64_t id = 0;
    bool finalize = false, ok = false;
    std::string error;
    if (!Field(msg, "id") || !Field(msg, "ok")) return "'saved' needs 'id' and 'ok'";
    if (!GetInt(msg, "id", &id, &err) || !GetBool(msg, "finalize", &finalize, &err) ||
        !GetBool(msg, "ok", &ok, &err) || !GetString(msg, "error", &error, &err)) {
      return err;
    }
    if (events_.on_saved) events_.on_saved(c.local_rank, id, finalize, ok, error);
  } else {
    return "unknown message type '" + type + "'";
  }
  return "";
}

}  // namespace ftrun::launcher
