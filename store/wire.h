// torch 1.13's c10d TCPStore wire protocol, server side: requests parsed from a byte stream,
// answers encoded. No I/O; the parser is resumable (it reads nothing until a whole request
// has arrived) and bounded (a declared length past the limits is refused as soon as it is
// read, before its bytes are waited for).
//
// A request is one byte of query type, then its fields; a string is a uint64 length and that
// many bytes; integers are in the host order of torch's client (little-endian on every
// platform torch supports; this code writes and reads little-endian explicitly):
//   0 SET         key, value                     -> (nothing)
//   1 COMPARE_SET key, expected, desired         -> string: the value now held
//   2 GET         key                            -> string (the key must be set)
//   3 ADD         key, int64 delta               -> int64: the new value
//   4 CHECK       uint64 n, n keys               -> uint8: 0 READY, 1 NOT_READY
//   5 WAIT        uint64 n, n keys               -> uint8 0 (STOP_WAITING) once all are set
//   6 GETNUMKEYS                                 -> int64: keys held
//   7 WATCH_KEY   key                            -> uint8 3 (KEY_CALLBACK_REGISTERED); later,
//                 per change: uint8 event (0 updated, 1 created, 2 deleted), key, old, new
//   8 DELETE_KEY  key                            -> int64: 1 deleted, 0 was not set
// torch >= 2.x opens a connection with VALIDATE (its query 0, then the uint32 magic
// 0x3C85F7CE) and numbers its queries differently: recognised and refused with that reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "store/kv_store.h"

namespace ftrun::store {

enum class Query : uint8_t {
  kSet = 0,
  kCompareSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kGetNumKeys = 6,
  kWatchKey = 7,
  kDeleteKey = 8,
};

inline constexpr uint32_t kNewerTorchValidateMagic = 0x3C85F7CE;

struct Request {
  Query type = Query::kSet;
  std::vector<std::string> keys;  // one key, or CHECK/WAIT's list
  std::string value;              // SET: the value; COMPARE_SET: expected
  std::string desired;            // COMPARE_SET
  int64_t delta = 0;              // ADD
};

struct Parsed {
  enum Status { kComplete, kNeedMore, kBad } status = kNeedMore;
  size_t consumed = 0;  // kComplete: the request's bytes
  Request request;      // kComplete
  std::string error;    // kBad: one line naming what was wrong (no payload bytes)
};

// Parses the first request in `buf`. kNeedMore: `buf` holds a valid prefix.
Parsed ParseRequest(std::string_view buf, const KvLimits& limits);

// The name of a query type for logs ("SET", ..., "query 42").
std::string QueryName(uint8_t type);

void AppendU8(std::string& out, uint8_t v);
void AppendI64(std::string& out, int64_t v);
void AppendString(std::string& out, std::string_view s);

}  // namespace ftrun::store
