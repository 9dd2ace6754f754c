// ControlServer's messages from a bound rank: each read into its typed message, the rank's
// state updated and the agent's handler called (control_server.h states the contract; the
// connection, its binding and its limits are in control_server.cc).
#include <chrono>

#include "common/json_message.h"
#include "ftrun/v1/control.pb.h"
#include "launcher/channels/control_server.h"

namespace ftrun::launcher {
namespace {

namespace v1 = ftrun::v1;

// Reads the line as the message of its type; "" or the reason it does not fit.
std::string Parse(const JsonLine& line, google::protobuf::Message* msg) {
  auto parsed = line.Into(msg);
  return parsed ? "" : parsed.error().message;
}

// Reads a flash checkpoint request; "" or why it does not fit.
template <typename Request>
std::string ParseRequest(const JsonLine& line, Request* request) {
  if (std::string err = Parse(line, request); !err.empty()) return err;
  if (!request->has_id()) return "a snapshot request needs an 'id'";
  return "";
}

}  // namespace

std::string ControlServer::HandleBound(int lr, const std::string& type, const JsonLine& line) {
  RankControl& rc = ranks_[lr];
  if (type == "hello" || type == "group" || type == "handler") {
    v1::ControlGroup group;
    v1::ControlHandler handler;
    std::string err = type == "handler" ? Parse(line, &handler) : Parse(line, &group);
    if (!err.empty()) return err;
    if (type == "handler") {
      if (handler.has_enabled()) group.set_handler(handler.enabled());
      if (handler.has_group()) group.set_group(handler.group());
    }
    if (group.has_group() && group.group().size() > 1024) return "replica group name over 1 KiB";
    if (group.has_handler()) rc.has_handler = group.handler();
    if (group.has_group()) rc.group = group.group();
  } else if (type == "progress") {
    v1::ControlProgress progress;
    if (std::string err = Parse(line, &progress); !err.empty()) return err;
    if (!progress.has_step()) return "'progress' without 'step'";
    rc.step = progress.step();
    rc.updating = progress.updating();
    rc.progress_seen = true;
    rc.last_progress = std::chrono::steady_clock::now();
    if (events_.on_progress) events_.on_progress(lr, rc.step, rc.updating);
  } else if (type == "finished") {
    v1::ControlFinished finished;
    if (std::string err = Parse(line, &finished); !err.empty()) return err;
    rc.finished = true;
  } else if (type == "peer_failed") {
    v1::ControlPeerFailed failed;
    if (std::string err = Parse(line, &failed); !err.empty()) return err;
    rc.peer_failed = true;
    if (events_.on_peer_failed) events_.on_peer_failed(lr, failed.error());
  } else if (type == "saved") {
    v1::ControlSaved saved;
    if (std::string err = Parse(line, &saved); !err.empty()) return err;
    if (!saved.has_id() || !saved.has_ok()) return "'saved' needs 'id' and 'ok'";
    if (events_.on_saved) {
      events_.on_saved(lr, saved.id(), saved.finalize(), saved.ok(), saved.error());
    }
  } else if (type.starts_with("snapshot_")) {
    return HandleSnapshot(lr, type, line);
  } else {
    return "unknown message type '" + type + "'";
  }
  return "";
}

std::string ControlServer::HandleSnapshot(int lr, const std::string& type, const JsonLine& line) {
  // Reads the request, checks what it requires, and hands it to its handler (or refuses it).
  auto route = [&](auto request, const auto& handler, auto check) -> std::string {
    if (std::string err = ParseRequest(line, &request); !err.empty()) return err;
    if (std::string err = check(request); !err.empty()) return err;
    if (handler) {
      handler(lr, request);
    } else {
      Send(lr, JsonMessage("snapshot_refused")
                   .Set("id", request.id())
                   .Set("error", std::string("this ftrun agent keeps no memory snapshots"))
                   .str());
    }
    return "";
  };
  auto needs_step = [&type](const auto& r) -> std::string {
    return r.has_step() ? "" : "'" + type + "' needs 'step'";
  };
  if (type == "snapshot_begin") {
    return route(v1::ControlSnapshotBegin{}, events_.on_snapshot_begin,
                 [](const v1::ControlSnapshotBegin& r) -> std::string {
                   if (!r.has_step() || !r.has_bytes()) {
                     return "'snapshot_begin' needs 'step' and 'bytes'";
                   }
                   return r.group().size() > 1024 ? "snapshot group name over 1 KiB" : "";
                 });
  }
  if (type == "snapshot_commit")
    return route(v1::ControlSnapshotCommit{}, events_.on_snapshot_commit, needs_step);
  if (type == "snapshot_get")
    return route(v1::ControlSnapshotGet{}, events_.on_snapshot_get, needs_step);
  if (type == "snapshot_mailbox") {
    return route(v1::ControlSnapshotMailbox{}, events_.on_snapshot_mailbox,
                 [](const auto&) { return std::string(); });
  }
  if (type == "snapshot_steps") {
    return route(v1::ControlSnapshotSteps{}, events_.on_snapshot_steps,
                 [](const auto&) { return std::string(); });
  }
  return "unknown message type '" + type + "'";
}

}  // namespace ftrun::launcher
