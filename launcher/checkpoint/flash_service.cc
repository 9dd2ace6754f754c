#include "launcher/checkpoint/flash_service.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <limits>
#include <set>
#include <utility>

#include "common/json_message.h"
#include "common/log.h"
#include "ftrun/v1/control.pb.h"

namespace ftrun::launcher {
namespace {

constexpr const char* kShardPrefix = "rank-";

constexpr const char* kDefaultFileName = "state.bin";  // of a save that names no file

bool IsShard(const std::string& group) { return group.starts_with(kShardPrefix); }

// The checkpoint a copy belongs to: the one copy "" alone, every shard together.
std::string CheckpointKey(const std::string& group) { return IsShard(group) ? "sharded" : group; }

// The file name of a replica's shard: the name its own rank gave it with its save (sent with
// the copy), whatever it looks like; the default name of a save without one when an older
// sender did not send it.
std::string ShardFileName(const ReplicaView& replica) {
  return replica.name.empty() ? kDefaultFileName : replica.name;
}

// Whether the request already has a part for copy `group`.
bool Holds(const CheckpointRequest& request, const std::string& group) {
  return std::any_of(request.parts.begin(), request.parts.end(),
                     [&](const CheckpointPart& p) { return p.group == group; });
}

}  // namespace

FlashService::FlashService(boost::asio::io_context& io, int local_ranks, uint64_t budget_bytes,
                           std::chrono::system_clock::time_point run_started, Send send)
    : io_(io),
      run_started_(run_started),
      send_(std::move(send)),
      store_(local_ranks, budget_bytes),
      checksummer_(io),
      persister_(io) {}

FlashService::~FlashService() = default;

void FlashService::Refuse(int local_rank, int64_t id, int64_t step, const std::string& error,
                          bool busy) {
  LauncherLog()->log(busy ? spdlog::level::debug : spdlog::level::warn,
                     "flash checkpoint: local_rank={} step={}: {}", local_rank, step, error);
  send_(local_rank,
        JsonMessage("snapshot_refused")
            .Set("id", id)
            .Set("step", step)
            .Set("error", error)
            .Set("busy", busy)
            .str(),
        -1);
}

void FlashService::Begin(int local_rank, const v1::ControlSnapshotBegin& r) {
  Reclaim(local_rank);
  auto box = r.mailbox() ? mailboxes_.find(local_rank) : mailboxes_.end();
  LeaseMailbox* mailbox = box == mailboxes_.end() ? nullptr : box->second.get();
  // In the mailbox a refusal is only "no": the worker asks again on the channel, and that
  // answer says why (and is logged) as any other refusal.
  auto refuse = [&](const std::string& error, bool busy) {
    if (mailbox == nullptr) return Refuse(local_rank, r.id(), r.step(), error, busy);
    mailbox->Refuse(r.id());
  };
  if (r.step() < 0 || r.bytes() <= 0) {
    return refuse("a snapshot needs a step >= 0 and at least one byte, got step " +
                      std::to_string(r.step()) + " and " + std::to_string(r.bytes()) + " bytes",
                  false);
  }
  if (static_cast<uint64_t>(r.bytes()) > std::numeric_limits<size_t>::max()) {
    return refuse("snapshot too large", false);
  }
  if (store_.Busy(local_rank, static_cast<size_t>(r.bytes()))) {
    return refuse("the buffer this save needs is being written to storage", true);
  }
  auto lease =
      store_.Begin(local_rank, static_cast<uint64_t>(r.step()), static_cast<size_t>(r.bytes()));
  if (!lease) return refuse(lease.error().message, false);
  begun_group_[local_rank] = r.group();
  if (mailbox != nullptr && MaybeLend(local_rank, r, *mailbox, lease->fd)) return;
  if (mailbox != nullptr && mailbox->Grant(r.id(), lease->step, lease->fd)) return;
  bool sent = send_(local_rank,
                    JsonMessage("snapshot_lease")
                        .Set("id", r.id())
                        .Set("step", r.step())
                        .Set("bytes", r.bytes())
                        .Set("fd", true)
                        .str(),
                    lease->fd);
  if (!sent) store_.Abort(local_rank);
}

void FlashService::Mailbox(int local_rank, const v1::ControlSnapshotMailbox& r) {
  Reclaim(local_rank);
  auto& mailbox = mailboxes_[local_rank];
  if (mailbox == nullptr) {
    auto created = LeaseMailbox::Create();
    if (!created) {
      mailboxes_.erase(local_rank);
      return Refuse(local_rank, r.id(), -1, "no lease mailbox: " + created.error().message, false);
    }
    mailbox = std::move(*created);
  }
  mailbox->Clear();
  send_(local_rank,
        JsonMessage("snapshot_mailbox")
            .Set("id", r.id())
            .Set("bytes", static_cast<int64_t>(LeaseMailbox::kBytes))
            .Set("fd", true)
            .str(),
        mailbox->fd());
}

void FlashService::Commit(int local_rank, const v1::ControlSnapshotCommit& r) {
  Reclaim(local_rank);
  persisting_[local_rank] = r.persist();
  SnapshotMeta meta;
  meta.group = begun_group_[local_rank];
  meta.checksum = CommitChecksum::Pending();
  meta.target = SnapshotTarget{
      .root = r.root(),
      .path = r.path(),
      .name = r.name().empty() ? kDefaultFileName : r.name(),
      .tracker = r.tracker(),
      .world_size = static_cast<int>(std::clamp<int64_t>(r.world_size(), 1, 1 << 24))};
  Status committed =
      r.step() < 0 || (r.has_begun() && r.begun() < 0) || (r.has_bytes() && r.bytes() <= 0)
          ? Status{Error{"a negative step or size"}}
          : store_.Commit(local_rank, static_cast<uint64_t>(r.step()), meta,
                          r.has_begun() ? std::optional<uint64_t>(r.begun()) : std::nullopt,
                          r.has_bytes() ? std::optional<size_t>(r.bytes()) : std::nullopt);
  if (!r.has_answer() || r.answer()) {
    send_(local_rank,
          JsonMessage("snapshot_committed")
              .Set("id", r.id())
              .Set("step", r.step())
              .Set("ok", static_cast<bool>(committed))
              .Set("error", committed ? std::string() : committed.error().message)
              .str(),
          -1);
  }
  if (!committed) {
    LauncherLog()->warn("flash checkpoint: {}", committed.error().message);
    return;
  }
  LauncherLog()->debug("flash checkpoint: local_rank={} group='{}' step={} in memory", local_rank,
                       meta.group, r.step());
  checksummer_.Commit(
      *store_.Newest(local_rank),
      [local_rank, step = r.step()](std::optional<uint32_t> crc, const std::string& why) {
        if (crc) {
          LauncherLog()->debug("flash checkpoint: local_rank={} step={} crc32c={}", local_rank,
                               step, *crc);
        } else {
          LauncherLog()->debug("flash checkpoint: local_rank={} step={} has no checksum: {}",
                               local_rank, step, why);
        }
      });
  if (r.persist() && !r.root().empty()) MaybePersist(*store_.Newest(local_rank), "flash");
}

void FlashService::Steps(int local_rank, const v1::ControlSnapshotSteps& r) {
  Reclaim(local_rank);
  std::set<uint64_t, std::greater<>> steps;
  for (int lr = 0; lr < store_.local_ranks(); ++lr) {
    for (const auto& view : store_.Complete(lr)) {
      if (view.meta.group == r.group()) steps.insert(view.step);
    }
  }
  if (replicas_ != nullptr) {
    for (const auto& replica : replicas_->Complete(r.group())) steps.insert(replica.step);
  }
  JsonMessage answer("snapshot_steps");
  answer.Set("id", r.id()).Set("steps", std::vector<int64_t>(steps.begin(), steps.end()));
  if (auto decided = IsShard(r.group()) ? restore_shards_ : restore_copy_) {
    answer.Set("restore_step", *decided);
  }
  if (auto it = failed_.find(r.root()); !r.root().empty() && it != failed_.end()) {
    answer.Set("persist_failed_step", it->second.step).Set("persist_error", it->second.error);
  }
  send_(local_rank, answer.str(), -1);
}

std::optional<SnapshotView> FlashService::Find(const std::string& group, uint64_t step) const {
  for (int lr = 0; lr < store_.local_ranks(); ++lr) {
    for (auto& view : store_.Complete(lr)) {
      if (view.meta.group == group && view.step == step) return view;
    }
  }
  return std::nullopt;
}

void FlashService::Get(int local_rank, const v1::ControlSnapshotGet& r) {
  Reclaim(local_rank);
  auto sources = std::make_shared<std::vector<Source>>();
  if (r.step() >= 0) {
    const auto step = static_cast<uint64_t>(r.step());
    for (int lr = 0; lr < store_.local_ranks(); ++lr) {
      for (auto& view : store_.Complete(lr)) {
        if (view.meta.group == r.group() && view.step == step) sources->push_back({view, {}});
      }
    }
    if (replicas_ != nullptr) {
      for (auto& replica : replicas_->Complete(r.group())) {
        if (replica.step == step) sources->push_back({{}, replica});
      }
    }
  }
  if (sources->empty()) {
    return Refuse(local_rank, r.id(), r.step(),
                  "no complete snapshot of step " + std::to_string(r.step()) + " of copy '" +
                      r.group() + "' on this node",
                  false);
  }
  HandOver(local_rank, r.id(), r.group(), static_cast<uint64_t>(r.step()), std::move(sources), 0);
}

void FlashService::HandOver(int local_rank, int64_t id, const std::string& group, uint64_t step,
                            std::shared_ptr<std::vector<Source>> sources, size_t next) {
  if (next == sources->size()) {
    return Refuse(local_rank, id, static_cast<int64_t>(step),
                  "every copy of step " + std::to_string(step) + " of copy '" + group +
                      "' on this node has changed since it was saved (corrupt; see the "
                      "agent's log)",
                  false);
  }
  auto checked = [this, local_rank, id, group, step, sources, next](std::optional<uint32_t> crc,
                                                                    const std::string& why) {
    const Source& s = (*sources)[next];
    Status intact;
    if (s.own && crc) {
      intact = ChecksumMatches(*s.own, *crc);
    } else if (s.replica && crc && *crc != s.replica->crc32c) {
      intact = Error{"the replica of " + group + " at step " + std::to_string(step) + " from " +
                     s.replica->from + " has checksum " + std::to_string(*crc) + ", not the " +
                     std::to_string(s.replica->crc32c) + " it arrived with"};
    } else if (!crc && s.own && s.own->generation_counter()->load() != s.own->generation) {
      intact = Error{"the snapshot of local rank " + std::to_string(s.own->local_rank) +
                     " at step " + std::to_string(step) + " was overwritten by a newer save"};
    }
    if (!intact) {
      LauncherLog()->warn("flash checkpoint: {}; skipped (corrupt), trying the next source",
                          intact.error().message);
      return HandOver(local_rank, id, group, step, sources, next + 1);
    }
    if (!crc) {
      LauncherLog()->debug("flash checkpoint: {} step={} handed over unchecked: {}", group, step,
                           why);
    }
    if (s.replica) {
      LauncherLog()->info(
          "flash checkpoint: {} step={} handed to local_rank={} from the replica of {}", group,
          step, local_rank, s.replica->from);
    }
    const size_t bytes = s.own ? s.own->bytes : s.replica->bytes;
    send_(local_rank,
          JsonMessage("snapshot")
              .Set("id", id)
              .Set("step", step)
              .Set("bytes", static_cast<uint64_t>(bytes))
              .Set("fd", true)
              .str(),
          s.own ? s.own->fd() : s.replica->fd());
  };
  const Source& s = (*sources)[next];
  if (s.own) {
    checksummer_.Current(*s.own, std::move(checked));
  } else {
    checksummer_.Current(*s.replica, std::move(checked));
  }
}

void FlashService::WorkerExited(int local_rank) {
  Reclaim(local_rank);
  store_.Abort(local_rank);
}

void FlashService::MaybePersist(const SnapshotView& view, const std::string& reason) {
  const SnapshotTarget& target = view.meta.target;
  if (target.root.empty()) return;
  const std::string key = target.root + "\n" + CheckpointKey(view.meta.group);
  if (auto it = stored_.find(key); it != stored_.end() && it->second >= view.step) return;
  CheckpointRequest request{.root = target.root,
                            .step = view.step,
                            .world_size = target.world_size,
                            .reason = reason,
                            .parts = {},
                            .tracker = target.tracker,
                            .link = target.path};
  if (!IsShard(view.meta.group)) {
    request.parts.push_back({view.meta.group, {{target.name, "", view, {}}}});
  } else {
    if (target.world_size > store_.local_ranks()) {
      // Not every shard can be on this node: the ranks write a DISK save themselves, and
      // when the job fails the agents stage what they hold (PersistSharedForExit).
      return;
    }
    for (int rank = 0; rank < target.world_size; ++rank) {
      std::string group = kShardPrefix + std::to_string(rank);
      auto shard = Find(group, view.step);
      if (!shard) {
        LauncherLog()->debug(
            "flash checkpoint: step {} not persisted here: shard {} is not on "
            "this node",
            view.step, group);
        return;
      }
      request.parts.push_back({group, {{shard->meta.target.name, "", *shard, {}}}});
    }
  }
  LauncherLog()->info("flash checkpoint: persisting step={} to {} ({})", view.step, target.root,
                      reason);
  Enqueue(key, std::move(request));
}

void FlashService::Enqueue(const std::string& key, CheckpointRequest request) {
  const uint64_t step = request.step;
  const bool shared = request.shared;
  std::string root = request.root;
  stored_[key] = step;
  if (!request.shared || job_run_started_) request.run_started = run_started_;  // see ctor
  if (in_flight_++ == 0) busy_.emplace(io_.get_executor());
  persister_.Persist(std::move(request), [this, key, step, shared,
                                          root = std::move(root)](Result<std::string> outcome) {
    Persisted(key, root, step, shared, std::move(outcome));
  });
}

void FlashService::PersistSharedForExit() {
  // Every step held here of a job whose shards span nodes, newest first: the agents of the
  // other nodes may not hold the newest one whole (a rank died before its commit), so the
  // step before it is staged too, and whichever step gets all its shards is stored.
  std::map<std::pair<uint64_t, std::string>, CheckpointRequest, std::greater<>> steps;
  std::vector<SnapshotView> views;
  for (int lr = 0; lr < store_.local_ranks(); ++lr) {
    for (auto& view : store_.Complete(lr)) views.push_back(std::move(view));
  }
  for (const auto& view : views) {
    const SnapshotTarget& target = view.meta.target;
    if (!IsShard(view.meta.group) || target.root.empty() ||
        target.world_size <= store_.local_ranks()) {
      continue;
    }
    auto at = std::make_pair(view.step, target.root);
    auto [it, fresh] = steps.try_emplace(at);
    CheckpointRequest& request = it->second;
    if (fresh) {
      request = CheckpointRequest{.root = target.root,
                                  .step = view.step,
                                  .world_size = target.world_size,
                                  .reason = "failure",
                                  .parts = {},
                                  .tracker = target.tracker,
                                  .link = target.path,
                                  .shared = true};
    }
    if (!Holds(request, view.meta.group))
      request.parts.push_back({view.meta.group, {{target.name, "", view, {}}}});
  }
  for (auto& [at, request] : steps) {
    // Copies of other nodes' shards of the same step help when their agents cannot write.
    for (const std::string& group :
         replicas_ != nullptr ? replicas_->Groups() : std::vector<std::string>{}) {
      if (Holds(request, group)) continue;
      for (const auto& replica : replicas_->Complete(group)) {
        if (replica.step != request.step) continue;
        request.parts.push_back({group, {{ShardFileName(replica), "", {}, replica}}});
        break;
      }
    }
    const std::string key = request.root + "\nshared\n" + std::to_string(request.step);
    if (stored_.contains(key)) continue;
    std::string groups;
    for (const auto& part : request.parts) groups += (groups.empty() ? "" : ",") + part.group;
    LauncherLog()->info(
        "flash checkpoint: persisting shards {} of step={} (world size {}) to {} (failure)", groups,
        request.step, request.world_size, request.root);
    Enqueue(key, std::move(request));
  }
}

void FlashService::Persisted(const std::string& key, const std::string& root, uint64_t step,
                             bool shared, Result<std::string> outcome) {
  if (!outcome) {
    failed_[root] = {step, outcome.error().message};
  } else if (auto it = failed_.find(root); it != failed_.end() && it->second.step <= step) {
    failed_.erase(it);
  }
  if (outcome && shared) {
    // Some shards of a multi-node step: the step may be complete now, completed by another
    // agent, superseded by a newer complete step, or still waiting for other agents' shards.
    LauncherLog()->info("flash checkpoint: shards of step={} held here are on storage: {}", step,
                        *outcome);
  } else if (outcome) {
    LauncherLog()->info("flash checkpoint: step={} stored at {}", step, *outcome);
  } else {
    LauncherLog()->error("flash checkpoint: persisting step {} failed: {}", step,
                         outcome.error().message);
    if (auto it = stored_.find(key); it != stored_.end() && it->second == step) stored_.erase(it);
  }
  if (--in_flight_ > 0) return;
  busy_.reset();
  auto idle = std::move(on_idle_);
  on_idle_.clear();
  for (auto& done : idle) done();
}

void FlashService::PersistForExit(std::function<void()> done) {
  // The workers are gone, or were sent SIGKILL (an excluded node): a record a dying worker
  // writes after this is a save lost, never one overwritten (the buffer taken back here is
  // written again only after a further save).
  for (int lr = 0; lr < store_.local_ranks(); ++lr) {
    Reclaim(lr);
    if (auto view = store_.Newest(lr)) MaybePersist(*view, "failure");
  }
  PersistSharedForExit();
  if (in_flight_ == 0) {
    boost::asio::post(io_, std::move(done));
    return;
  }
  LauncherLog()->info(
      "flash checkpoint: the job failed; writing the newest memory snapshots "
      "before exiting");
  on_idle_.push_back(std::move(done));
}

}  // namespace ftrun::launcher
