#include "store/protocol.h"

#include <fmt/format.h>

namespace ftrun::store {

namespace {

constexpr uint8_t kReady = 0;
constexpr uint8_t kNotReady = 1;
constexpr uint8_t kStopWaiting = 0;

void Deliver(KvStore& kv, std::vector<Outgoing>& out) {
  for (auto& e : kv.TakeEvents()) {
    if (auto* w = std::get_if<WaitReleased>(&e)) {
      std::string b;
      AppendU8(b, kStopWaiting);
      out.push_back({w->conn, std::move(b)});
    } else {
      auto& f = std::get<WatchFired>(e);
      std::string b;
      AppendU8(b, static_cast<uint8_t>(f.event));
      AppendString(b, f.key);
      AppendString(b, f.old_value);
      AppendString(b, f.new_value);
      out.push_back({f.conn, std::move(b)});
    }
  }
}

}  // namespace

Status Apply(KvStore& kv, ConnId conn, const Request& r, std::vector<Outgoing>& out) {
  std::string answer;
  bool answers = true;
  switch (r.type) {
    case Query::kSet:
      if (auto s = kv.Set(r.keys[0], r.value); !s) return s;
      answers = false;
      break;
    case Query::kCompareSet: {
      auto v = kv.CompareSet(r.keys[0], r.value, r.desired);
      if (!v) return v.error();
      AppendString(answer, *v);
      break;
    }
    case Query::kGet: {
      const std::string* v = kv.Get(r.keys[0]);
      if (!v) return Error{"the key is not set"};
      AppendString(answer, *v);
      break;
    }
    case Query::kAdd: {
      auto v = kv.Add(r.keys[0], r.delta);
      if (!v) return v.error();
      AppendI64(answer, *v);
      break;
    }
    case Query::kCheck:
      AppendU8(answer, kv.Has(r.keys) ? kReady : kNotReady);
      break;
    case Query::kWait:
      if (auto s = kv.AdmitWait(conn, r.keys); !s) return s;
      if (kv.Wait(conn, r.keys)) {
        AppendU8(answer, kStopWaiting);
      } else {
        answers = false;  // WaitReleased later
      }
      break;
    case Query::kGetNumKeys:
      AppendI64(answer, static_cast<int64_t>(kv.size()));
      break;
    case Query::kWatchKey:
      if (auto s = kv.Watch(conn, r.keys[0]); !s) return s;
      AppendU8(answer, static_cast<uint8_t>(WatchEvent::kRegistered));
      break;
    case Query::kDeleteKey:
      AppendI64(answer, kv.Delete(r.keys[0]) ? 1 : 0);
      break;
  }
  if (answers) out.push_back({conn, std::move(answer)});
  Deliver(kv, out);
  return {};
}

}  // namespace ftrun::store
