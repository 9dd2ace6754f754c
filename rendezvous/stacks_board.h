// StacksBoard: the server's side of job-wide stack dumps. An order is opened (by
// `ftrun status --stacks`, or an agent whose ranks hang, through Status with dump_stacks)
// for the members of the round; each member's agent answers once with its ranks' stacks
// (Report KIND_STACKS); readers ask what an order has collected so far. An order younger
// than `reuse_within` is reused rather than opening another: every agent of a hung job
// detects the hang within a monitor interval of the others, and one dump is enough.
//
// Pure: time is passed in. Thread: the server's loop. Bounds: the last 4 orders are kept;
// a collection returns at most max_bytes of stack text (the other ranks are counted in
// left_out); an answer for an unknown order, or from a node that is not a member of it, is
// ignored.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "rendezvous/job_state.h"

namespace ftrun::rendezvous {

class StacksBoard {
 public:
  struct Member {
    std::string node_id;
    std::string host;
  };

  // Returns the order's id, and whether it is a new one.
  std::pair<uint64_t, bool> Open(std::vector<Member> members, TimePoint now,
                                 Duration reuse_within = Duration(5));
  void Answer(const std::string& node_id, uint64_t id, std::vector<RankStack> stacks);
  // What order `id` (0: the newest) has so far; id 0 in the result when there is none.
  StacksCollection Get(uint64_t id, size_t max_bytes = 3 << 20) const;

 private:
  struct Order {
    uint64_t id = 0;
    TimePoint opened;
    std::vector<Member> members;
    std::map<std::string, std::vector<RankStack>> answers;  // node -> its ranks
  };
  std::deque<Order> orders_;
  uint64_t next_id_ = 1;
};

}  // namespace ftrun::rendezvous
