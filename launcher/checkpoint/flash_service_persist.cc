// FlashService's persisting (flash_service.h): a copy's snapshot written to storage by the
// SnapshotPersister after a DISK save, and every copy's newest when the job fails.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <map>
#include <utility>

#include "common/log.h"
#include "launcher/checkpoint/flash_service.h"

namespace ftrun::launcher {
namespace {

// The checkpoint a copy belongs to: the one copy "" alone, every shard together.
std::string CheckpointKey(const std::string& group) {
  return IsShardGroup(group) ? "sharded" : group;
}

// The file name of a replica's shard: the name its own rank gave it with its save (sent with
// the copy), whatever it looks like; the default name of a save without one when an older
// sender did not send it.
std::string ShardFileName(const ReplicaView& replica) {
  return replica.name.empty() ? FlashService::kDefaultFileName : replica.name;
}

// Whether the request already has a part for copy `group`.
bool Holds(const CheckpointRequest& request, const std::string& group) {
  return std::any_of(request.parts.begin(), request.parts.end(),
                     [&](const CheckpointPart& p) { return p.group == group; });
}

}  // namespace

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
  if (!IsShardGroup(view.meta.group)) {
    request.parts.push_back({view.meta.group, {{target.name, "", view, {}}}, target.part_link});
  } else {
    if (target.world_size > store_.local_ranks()) {
      // Not every shard can be on this node: the ranks write a DISK save themselves, and
      // when the job fails the agents stage what they hold (PersistShared).
      return;
    }
    for (int rank = 0; rank < target.world_size; ++rank) {
      std::string group = ShardGroup(rank);
      auto shard = Find(group, view.step);
      if (!shard) {
        LauncherLog()->debug(
            "flash checkpoint: step {} not persisted here: shard {} is not on "
            "this node",
            view.step, group);
        return;
      }
      request.parts.push_back(
          {group, {{shard->meta.target.name, "", *shard, {}}}, shard->meta.target.part_link});
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

void FlashService::PersistShared(const std::string& reason) {
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
    if (!IsShardGroup(view.meta.group) || target.root.empty() ||
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
                                  .reason = reason,
                                  .parts = {},
                                  .tracker = target.tracker,
                                  .link = target.path,
                                  .shared = true};
    }
    if (!Holds(request, view.meta.group)) {
      request.parts.push_back({view.meta.group, {{target.name, "", view, {}}}, target.part_link});
    }
  }
  for (auto& [at, request] : steps) {
    // Copies of other nodes' shards of the same step help when their agents cannot write.
    for (const std::string& group :
         replicas_ != nullptr ? replicas_->Groups() : std::vector<std::string>{}) {
      if (Holds(request, group)) continue;
      for (const auto& replica : replicas_->Complete(group)) {
        if (replica.step != request.step) continue;
        request.parts.push_back(
            {group, {{ShardFileName(replica), "", {}, replica}}, replica.part_link});
        break;
      }
    }
    const std::string key = request.root + "\nshared\n" + std::to_string(request.step);
    if (stored_.contains(key)) continue;
    std::string groups;
    for (const auto& part : request.parts) groups += (groups.empty() ? "" : ",") + part.group;
    LauncherLog()->info(
        "flash checkpoint: persisting shards {} of step={} (world size {}) to {} ({})", groups,
        request.step, request.world_size, request.root, request.reason);
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

bool FlashService::PersistNewest(const std::string& reason, bool one_copy) {
  // The workers are gone, or were sent SIGKILL (an excluded node): a record a dying worker
  // writes after this is a save lost, never one overwritten (the buffer taken back here is
  // written again only after a further save).
  bool any = false;
  for (int lr = 0; lr < store_.local_ranks(); ++lr) {
    Reclaim(lr);
    auto view = store_.Newest(lr);
    if (!view) continue;
    any = true;
    if (one_copy || IsShardGroup(view->meta.group)) MaybePersist(*view, reason);
  }
  return any;
}

void FlashService::PersistAtBreakpoint(bool one_copy) {
  if (in_flight_ > 0) {  // as DLRover's saver, busy writing, skips the breakpoint
    LauncherLog()->info(
        "flash checkpoint: the workers stopped while earlier snapshots are being written; "
        "this breakpoint's are not (--save-at-breakpoint)");
    return;
  }
  const bool any = PersistNewest("breakpoint", one_copy);
  if (in_flight_ > 0) {
    LauncherLog()->info(
        "flash checkpoint: the workers stopped; writing the newest memory snapshots "
        "(--save-at-breakpoint)");
  } else if (!any && !said_no_snapshots_) {
    said_no_snapshots_ = true;
    LauncherLog()->info(
        "flash checkpoint: the workers stopped and no rank saved a memory snapshot here "
        "(--save-at-breakpoint writes those of ftrun.flash_checkpoint; DLRover's own flash "
        "checkpoint keeps its state where ftrun does not read it)");
  }
}

void FlashService::PersistForExit(std::function<void()> done) {
  PersistNewest("failure", /*one_copy=*/true);
  PersistShared("failure");
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
