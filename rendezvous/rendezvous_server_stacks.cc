// RendezvousServer, continued: job-wide stack dumps (ftrun status --stacks, --hang-timeout).
// An order goes to every member through its view (NodeView.stacks_id); the members answer
// with Report KIND_STACKS; Status returns what an order has collected.
#include "common/log.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/wire.h"

namespace ftrun::rendezvous {

bool RendezvousServer::AddStacks(const v1::StatusRequest& request, JobStatus& job) {
  if (!request.dump_stacks() && request.stacks_id() == 0) return false;
  bool opened = false;
  uint64_t id = request.stacks_id();
  if (request.dump_stacks()) {
    std::vector<StacksBoard::Member> members;
    for (const auto& n : job.nodes) {
      if (n.group_rank >= 0) members.push_back({n.node_id, n.host});
    }
    const auto [order, fresh] = stacks_.Open(std::move(members), Clock::now());
    id = order;
    if (fresh) {
      RendezvousLog()->info("stack dump ordered id={} round={}", id, state_.round());
      state_.OrderStacks(id);
      opened = true;
      job.view.stacks_id = id;
    }
  }
  job.stacks = stacks_.Get(id);
  return opened;
}

void RendezvousServer::TakeStacks(const std::string& node, const v1::ReportRequest& report) {
  std::vector<RankStack> stacks;
  for (const auto& s : report.stacks()) stacks.push_back(FromWire(s));
  RendezvousLog()->debug("stacks received node={} id={} ranks={}", node, report.stacks_id(),
                         stacks.size());
  stacks_.Answer(node, report.stacks_id(), std::move(stacks));
}

}  // namespace ftrun::rendezvous
