#include "rendezvous/stacks_board.h"

#include <algorithm>

namespace ftrun::rendezvous {

std::pair<uint64_t, bool> StacksBoard::Open(std::vector<Member> members, TimePoint now,
                                            Duration reuse_within) {
  if (!orders_.empty() && now - orders_.back().opened < reuse_within) {
    return {orders_.back().id, false};
  }
  Order o;
  o.id = next_id_++;
  o.opened = now;
  o.members = std::move(members);
  orders_.push_back(std::move(o));
  if (orders_.size() > 4) orders_.pop_front();
  return {orders_.back().id, true};
}

void StacksBoard::Answer(const std::string& node_id, uint64_t id, std::vector<RankStack> stacks) {
  for (auto& o : orders_) {
    if (o.id != id) continue;
    const bool member = std::any_of(o.members.begin(), o.members.end(),
                                    [&](const Member& m) { return m.node_id == node_id; });
    if (member) o.answers[node_id] = std::move(stacks);
  }
}

StacksCollection StacksBoard::Get(uint64_t id, size_t max_bytes) const {
  StacksCollection c;
  const Order* order = nullptr;
  for (const auto& o : orders_) {
    if (o.id == id || (id == 0 && &o == &orders_.back())) order = &o;
  }
  if (!order) return c;
  c.id = order->id;
  size_t bytes = 0;
  for (const auto& m : order->members) {
    auto it = order->answers.find(m.node_id);
    if (it == order->answers.end()) {
      c.missing.push_back(m.host);
      continue;
    }
    for (const auto& s : it->second) {
      const size_t size = s.python.size() + s.native.size() + s.note.size();
      if (bytes + size > max_bytes) {
        ++c.left_out;
        continue;
      }
      bytes += size;
      c.stacks.push_back(s);
    }
  }
  std::sort(c.stacks.begin(), c.stacks.end(),
            [](const RankStack& a, const RankStack& b) { return a.rank < b.rank; });
  c.complete = c.missing.empty();
  return c;
}

}  // namespace ftrun::rendezvous
