// Wire conversions of stack dumps (rendezvous.proto: RankStack, StacksCollection).
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

void ToWire(const RankStack& in, v1::RankStack* out) {
  out->set_rank(in.rank);
  out->set_host(in.host.substr(0, 1024));
  out->set_pid(in.pid);
  out->set_python(in.python.substr(0, kMaxStackText));
  out->set_native(in.native.substr(0, kMaxStackText));
  out->set_note(in.note.substr(0, 1024));
}

RankStack FromWire(const v1::RankStack& in) {
  return RankStack{in.rank(), in.host(), in.pid(), in.python(), in.native(), in.note()};
}

void ToWire(const StacksCollection& in, v1::StacksCollection* out) {
  out->set_id(in.id);
  out->set_complete(in.complete);
  for (const auto& s : in.stacks) ToWire(s, out->add_stacks());
  for (const auto& m : in.missing) out->add_missing(m);
  out->set_left_out(in.left_out);
}

StacksCollection FromWire(const v1::StacksCollection& in) {
  StacksCollection c;
  c.id = in.id();
  c.complete = in.complete();
  for (const auto& s : in.stacks()) c.stacks.push_back(FromWire(s));
  c.missing.assign(in.missing().begin(), in.missing().end());
  c.left_out = in.left_out();
  return c;
}

Status CheckStacksLimits(const v1::ReportRequest& req) {
  if (static_cast<size_t>(req.stacks_size()) > kMaxStacksPerReport) {
    return Error{"report carries " + std::to_string(req.stacks_size()) + " rank stacks (limit " +
                 std::to_string(kMaxStacksPerReport) + ")"};
  }
  for (const auto& s : req.stacks()) {
    if (s.python().size() > kMaxStackText || s.native().size() > kMaxStackText ||
        s.note().size() > 1024 || s.host().size() > 1024) {
      return Error{"report carries a stack over 64 KiB (or a note or host over 1 KiB)"};
    }
  }
  return {};
}

}  // namespace ftrun::rendezvous
