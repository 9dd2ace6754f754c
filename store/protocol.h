// One request applied to the store, and what it owes to whom: the requester's answer and the
// answers a change releases on other connections (a finished WAIT, WATCH_KEY notices), as
// torch 1.13's TCPStore server sends them (wire.h). Pure: no I/O.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "store/kv_store.h"
#include "store/wire.h"

namespace ftrun::store {

struct Outgoing {
  ConnId conn;
  std::string bytes;
};

// Applies `request` from `conn`; appends the bytes to send, in order, to `out`. An error
// (GET of an unset key, ADD to a non-integer, a bound reached) means: close `conn`, as
// torch's server does when a handler throws; the store is unchanged then.
Status Apply(KvStore& kv, ConnId conn, const Request& request, std::vector<Outgoing>& out);

}  // namespace ftrun::store
