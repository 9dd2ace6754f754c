#include "launcher/standby/standby_pool.h"

#include <algorithm>

namespace ftrun::launcher {

const char* StandbyStateName(StandbyState s) {
  switch (s) {
    case StandbyState::kStarting:
      return "starting";
    case StandbyState::kReady:
      return "ready";
    case StandbyState::kHandingOver:
      return "handing-over";
    case StandbyState::kDead:
      return "dead";
  }
  return "?";
}

StandbyPool::Pick StandbyPool::Take(const std::string& key) {
  if (off()) return {0, "warm_restart_off " + off_reason_};
  bool starting = false;
  for (auto& [id, slot] : slots_) {
    if (slot.key != key) continue;
    if (slot.state == StandbyState::kReady) {
      slot.state = StandbyState::kHandingOver;
      return {id, ""};
    }
    starting = starting || slot.state == StandbyState::kStarting;
  }
  if (starting) return {0, "standby_starting"};
  if (auto it = last_death_.find(key); it != last_death_.end()) return {0, it->second};
  return {0, "no_standby"};
}

void StandbyPool::HandedOver(uint64_t id) {
  if (slots_.erase(id) != 0) deaths_ = 0;
}

void StandbyPool::HandOverFailed(uint64_t id, const std::string& why, TimePoint now) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  it->second.state = StandbyState::kDead;
  Died(it->second.key, "handover_failed " + why, false, now);
}

void StandbyPool::Want(const std::map<std::string, int>& keys, TimePoint now) {
  wanted_ = keys;
  next_spawn_ = std::max(next_spawn_, now + opts_.refill_delay);
}

void StandbyPool::Ready(uint64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.state != StandbyState::kStarting) return;
  it->second.state = StandbyState::kReady;
  startup_failures_ = 0;
  last_death_.erase(it->second.key);
}

void StandbyPool::Broken(uint64_t id, const std::string& reason, const std::string& detail,
                         TimePoint now) {
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.state == StandbyState::kDead) return;
  const bool before_ready = it->second.state == StandbyState::kStarting;
  it->second.state = StandbyState::kDead;
  // The same modules fail the same way in every standby: no point in trying again.
  if (reason == "preload_failed" || reason == "preload_touched_gpu") {
    TurnOff("cause=" + reason + " " + detail);
    return;
  }
  Died(it->second.key, "standby_broken cause=" + reason + " " + detail, before_ready, now);
}

void StandbyPool::Exited(uint64_t id, const std::string& how, TimePoint now) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  const Slot slot = it->second;
  slots_.erase(it);
  if (slot.state == StandbyState::kDead) return;  // killed or broken: already counted
  Died(slot.key, "standby_died how=" + how + " state=" + StandbyStateName(slot.state),
       slot.state == StandbyState::kStarting, now);
}

void StandbyPool::SpawnFailed(uint64_t id, const std::string& why, TimePoint now) {
  auto it = slots_.find(id);
  if (it == slots_.end()) return;
  const std::string key = it->second.key;
  slots_.erase(it);
  Died(key, "spawn_failed " + why, true, now);
}

void StandbyPool::Died(const std::string& key, const std::string& how, bool before_ready,
                       TimePoint now) {
  last_death_[key] = how;
  ++deaths_;
  const std::chrono::milliseconds doubled(opts_.backoff_initial.count()
                                          << std::min(deaths_ - 1, 20));
  const auto backoff = std::min(opts_.backoff_max, doubled);
  next_spawn_ = std::max(next_spawn_, now + backoff);
  if (before_ready && ++startup_failures_ >= opts_.max_startup_failures) {
    TurnOff("cause=standby_startup_failures count=" + std::to_string(startup_failures_) +
            " last=" + how);
  }
}

void StandbyPool::TurnOff(const std::string& why) {
  if (off_reason_.empty()) off_reason_ = why;
}

int StandbyPool::LiveCount(const std::string& key) const {
  int n = 0;
  for (const auto& [id, slot] : slots_) {
    if (slot.key == key &&
        (slot.state == StandbyState::kStarting || slot.state == StandbyState::kReady)) {
      ++n;
    }
  }
  return n;
}

std::vector<StandbyPool::Action> StandbyPool::Poll(TimePoint now) {
  std::vector<Action> actions;
  auto kill = [&](uint64_t id, Slot& slot, std::string why) {
    slot.state = StandbyState::kDead;
    actions.push_back({Action::Kind::kKill, id, slot.key, std::move(why)});
  };
  for (auto& [id, slot] : slots_) {
    if (slot.state == StandbyState::kStarting && now - slot.started >= opts_.ready_timeout) {
      kill(id, slot, "hung");
      const auto secs = std::chrono::duration_cast<std::chrono::seconds>(opts_.ready_timeout);
      Died(slot.key, "standby_hung not_ready_after_s=" + std::to_string(secs.count()), true, now);
    }
  }
  if (off()) {
    for (auto& [id, slot] : slots_) {
      if (slot.state != StandbyState::kDead) kill(id, slot, "warm_restart_off");
    }
    return actions;
  }
  // Surplus first (a changed command or environment leaves standbys nobody can take), the
  // ones still starting before the ready ones.
  for (const StandbyState s : {StandbyState::kStarting, StandbyState::kReady}) {
    for (auto& [id, slot] : slots_) {
      if (slot.state != s) continue;
      auto w = wanted_.find(slot.key);
      if (LiveCount(slot.key) > (w == wanted_.end() ? 0 : w->second)) kill(id, slot, "surplus");
    }
  }
  if (now >= next_spawn_) {
    for (const auto& [key, count] : wanted_) {
      for (int n = LiveCount(key); n < count; ++n) {
        const uint64_t id = next_id_++;
        slots_[id] = Slot{key, StandbyState::kStarting, now};
        actions.push_back({Action::Kind::kSpawn, id, key, ""});
      }
    }
  }
  return actions;
}

std::optional<StandbyPool::TimePoint> StandbyPool::NextDeadline() const {
  if (off()) return std::nullopt;
  std::optional<TimePoint> next;
  auto consider = [&](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& [key, count] : wanted_) {
    if (LiveCount(key) < count) {
      consider(next_spawn_);
      break;
    }
  }
  for (const auto& [id, slot] : slots_) {
    if (slot.state == StandbyState::kStarting) consider(slot.started + opts_.ready_timeout);
  }
  return next;
}

std::vector<uint64_t> StandbyPool::Shutdown() {
  TurnOff("cause=job_over");
  wanted_.clear();
  std::vector<uint64_t> ids;
  for (auto& [id, slot] : slots_) {
    if (slot.state != StandbyState::kDead) {
      slot.state = StandbyState::kDead;
      ids.push_back(id);
    }
  }
  return ids;
}

std::optional<StandbyState> StandbyPool::state(uint64_t id) const {
  auto it = slots_.find(id);
  if (it == slots_.end()) return std::nullopt;
  return it->second.state;
}

size_t StandbyPool::Count(StandbyState s) const {
  size_t n = 0;
  for (const auto& [id, slot] : slots_) n += slot.state == s ? 1 : 0;
  return n;
}

}  // namespace ftrun::launcher
