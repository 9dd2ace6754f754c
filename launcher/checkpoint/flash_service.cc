#include "launcher/checkpoint/flash_service.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "common/json_message.h"
#include "common/log.h"
#include "ftrun/v1/control.pb.h"
#include "launcher/checkpoint/checkpoint_io.h"

namespace ftrun::launcher {

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
      .part_link = checkpoint_io::AbsoluteWithoutControls(r.part_link()) ? r.part_link() : "",
      .world_size = static_cast<int>(std::clamp<int64_t>(r.world_size(), 1, 1 << 24))};
  if (meta.target.part_link != r.part_link()) {
    LauncherLog()->warn(
        "flash checkpoint: local_rank={} step={}: its part_link is not an absolute path "
        "without control characters: no link made",
        local_rank, r.step());
  }
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
  if (auto decided = IsShardGroup(r.group()) ? restore_shards_ : restore_copy_) {
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

}  // namespace ftrun::launcher
