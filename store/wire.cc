#include "store/wire.h"

#include <fmt/format.h>

#include <cstring>

namespace ftrun::store {

namespace {

uint64_t LoadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Reads fields from the front of a buffer; a short read means "need more".
class Reader {
 public:
  explicit Reader(std::string_view buf) : buf_(buf) {}
  bool U64(uint64_t& v) {
    if (buf_.size() - pos_ < 8) return false;
    v = LoadLe64(buf_.data() + pos_);
    pos_ += 8;
    return true;
  }
  // Only the length is checked here, against `max`; the caller decides what too long means.
  enum Str { kOk, kShort, kTooLong };
  Str String(size_t max, std::string* out, uint64_t* declared) {
    uint64_t n = 0;
    if (!U64(n)) return kShort;
    *declared = n;
    if (n > max) return kTooLong;
    if (buf_.size() - pos_ < n) return kShort;
    if (out) out->assign(buf_.data() + pos_, n);
    pos_ += n;
    return kOk;
  }
  size_t pos() const { return pos_; }
  void Skip(size_t n) { pos_ += n; }
  size_t left() const { return buf_.size() - pos_; }

 private:
  std::string_view buf_;
  size_t pos_ = 0;
};

Parsed Bad(std::string why) {
  Parsed p;
  p.status = Parsed::kBad;
  p.error = std::move(why);
  return p;
}

}  // namespace

std::string QueryName(uint8_t type) {
  static const char* const kNames[] = {"SET",  "COMPARE_SET", "GET",       "ADD",       "CHECK",
                                       "WAIT", "GETNUMKEYS",  "WATCH_KEY", "DELETE_KEY"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return fmt::format("query {}", type);
}

namespace {

// One pass over `buf`. Without `copy` nothing is copied (so that a large request arriving in
// many reads is measured, not copied, at each read); with it the fields are filled in.
Parsed Parse(std::string_view buf, const KvLimits& limits, bool copy) {
  Parsed need;  // kNeedMore
  if (buf.empty()) return need;
  const uint8_t type = static_cast<uint8_t>(buf[0]);
  if (type > static_cast<uint8_t>(Query::kDeleteKey)) {
    return Bad(
        fmt::format("unknown query type {} (torch 1.13 sends 0-8; a newer torch's client? see "
                    "FTRUN_AGENT_STORE in ftrun(1))",
                    type));
  }
  // torch >= 2.x starts with VALIDATE = 0 and a 4-byte magic: as a 1.13 SET, a key length
  // whose low 32 bits are the magic.
  if (type == 0 && buf.size() >= 5) {
    uint32_t magic = 0;
    for (int i = 4; i >= 1; --i) magic = (magic << 8) | static_cast<uint8_t>(buf[i]);
    if (magic == kNewerTorchValidateMagic) {
      return Bad(
          "a torch >= 2.x client (its VALIDATE handshake): this store speaks torch 1.13's "
          "protocol; set FTRUN_AGENT_STORE=0 to let worker rank 0 host the store (ftrun(1))");
    }
  }
  Reader r(buf);
  r.Skip(1);
  Parsed p;
  Request& req = p.request;
  req.type = static_cast<Query>(type);
  const std::string name = QueryName(type);
  uint64_t declared = 0;
  auto key = [&](std::string* out) -> Reader::Str {
    return r.String(limits.max_key_bytes, copy ? out : nullptr, &declared);
  };
  auto too_long = [&](const char* what, size_t max) {
    return Bad(fmt::format("{} with a {} of {} bytes (at most {})", name, what, declared, max));
  };
  auto one_key = [&]() -> Reader::Str {
    if (copy) req.keys.resize(1);
    return key(copy ? &req.keys[0] : nullptr);
  };
  switch (req.type) {
    case Query::kSet:
    case Query::kCompareSet:
    case Query::kGet:
    case Query::kAdd:
    case Query::kWatchKey:
    case Query::kDeleteKey: {
      auto s = one_key();
      if (s == Reader::kTooLong) return too_long("key", limits.max_key_bytes);
      if (s == Reader::kShort) return need;
      if (req.type == Query::kSet || req.type == Query::kCompareSet) {
        s = r.String(limits.max_value_bytes, copy ? &req.value : nullptr, &declared);
        if (s == Reader::kTooLong) return too_long("value", limits.max_value_bytes);
        if (s == Reader::kShort) return need;
      }
      if (req.type == Query::kCompareSet) {
        s = r.String(limits.max_value_bytes, copy ? &req.desired : nullptr, &declared);
        if (s == Reader::kTooLong) return too_long("value", limits.max_value_bytes);
        if (s == Reader::kShort) return need;
      }
      if (req.type == Query::kAdd) {
        uint64_t d = 0;
        if (!r.U64(d)) return need;
        req.delta = static_cast<int64_t>(d);
      }
      break;
    }
    case Query::kCheck:
    case Query::kWait: {
      uint64_t n = 0;
      if (!r.U64(n)) return need;
      if (n > limits.max_keys_per_request) {
        return Bad(fmt::format("{} of {} keys (at most {})", name, n, limits.max_keys_per_request));
      }
      if (copy) req.keys.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        auto s = key(copy ? &req.keys[i] : nullptr);
        if (s == Reader::kTooLong) return too_long("key", limits.max_key_bytes);
        if (s == Reader::kShort) return need;
      }
      break;
    }
    case Query::kGetNumKeys:
      break;
  }
  p.status = Parsed::kComplete;
  p.consumed = r.pos();
  return p;
}

}  // namespace

Parsed ParseRequest(std::string_view buf, const KvLimits& limits) {
  Parsed measured = Parse(buf, limits, false);
  if (measured.status != Parsed::kComplete) return measured;
  return Parse(buf.substr(0, measured.consumed), limits, true);
}

void AppendU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }

void AppendI64(std::string& out, int64_t v) {
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

void AppendString(std::string& out, std::string_view s) {
  AppendI64(out, static_cast<int64_t>(s.size()));
  out.append(s);
}

}  // namespace ftrun::store
