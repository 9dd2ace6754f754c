// Fuzz target: the rendezvous messages as the server and the agents decode them (wire.h).
// The first input byte picks the message (0 JoinRequest, 1 WatchRequest, 2 ReportRequest,
// 3 NodeView, 4 JobStatus), the rest is its protobuf encoding. For any input: no crash, no
// sanitizer report; the limit checks never accept what they document as too big; and
// decoding is a projection: FromWire(ToWire(FromWire(m))) encodes like FromWire(m) once the
// encoder's clipping has been applied (so the agents and the server agree on what they read).
#include <google/protobuf/unknown_field_set.h>

#include <cstdint>
#include <string>

#include "ftrun/v1/rendezvous.pb.h"
#include "fuzz/fuzz_support.h"
#include "rendezvous/credentials.h"
#include "rendezvous/wire.h"

namespace {

namespace rdzv = ftrun::rendezvous;
namespace v1 = ftrun::v1;

template <class Wire, class Domain>
std::string Encode(const Domain& d) {
  Wire w;
  rdzv::ToWire(d, &w);
  return w.SerializeAsString();
}

void CheckNodeView(const v1::NodeView& in) {
  const rdzv::NodeView once = rdzv::FromWire(in);
  v1::NodeView wire;
  rdzv::ToWire(once, &wire);
  const rdzv::NodeView twice = rdzv::FromWire(wire);
  FTRUN_FUZZ_CHECK(wire.failures_size() <= static_cast<int>(rdzv::kMaxFailures),
                   "ToWire kept too many failures");
  FTRUN_FUZZ_CHECK(twice.phase == once.phase && twice.round == once.round &&
                       twice.version == once.version && twice.member == once.member,
                   "a view changed through the wire");
  FTRUN_FUZZ_CHECK(Encode<v1::NodeView>(twice) == wire.SerializeAsString(),
                   "ToWire o FromWire is not a projection");
}

void CheckNode(const v1::NodeInfo& n, const std::string& node_id) {
  if (!rdzv::CheckLimits(n)) return;
  FTRUN_FUZZ_CHECK(n.nproc_per_node() > 0 && n.nproc_per_node() <= 65536, "nproc accepted");
  const rdzv::NodeInfo d = rdzv::FromWire(n, node_id);
  v1::NodeInfo back;
  rdzv::ToWire(d, &back);
  FTRUN_FUZZ_CHECK(back.addr() == n.addr() && back.host() == n.host() &&
                       back.node_rank() == n.node_rank() &&
                       back.nproc_per_node() == n.nproc_per_node() &&
                       back.free_port() == n.free_port() && back.probe_port() == n.probe_port(),
                   "a node changed through the wire");
}

// The header every request carries: what CheckHeader accepts is safe to log and bounded.
void CheckRequestHeader(const v1::RequestHeader& h) {
  if (!rdzv::CheckHeader(h)) return;
  FTRUN_FUZZ_CHECK(!h.node_id().empty() && h.node_id().size() <= rdzv::kMaxNodeId, "node id");
  FTRUN_FUZZ_CHECK(rdzv::IsPrintable(h.node_id()), "a node id with control characters");
  FTRUN_FUZZ_CHECK(rdzv::Printable(h.node_id(), rdzv::kMaxNodeId) == h.node_id() ||
                       h.node_id().find('\\') != std::string::npos,
                   "a checked node id changed when made printable");
  FTRUN_FUZZ_CHECK(h.node_secret().size() <= rdzv::kMaxSecretBytes, "node secret");
  FTRUN_FUZZ_CHECK(h.token().size() <= rdzv::kMaxToken, "token");
}

void CheckReport(const v1::ReportRequest& r) {
  const bool ok = rdzv::CheckLimits(r).has_value();
  if (!ok) return;
  FTRUN_FUZZ_CHECK(r.failures_size() <= static_cast<int>(rdzv::kMaxFailures), "failures");
  FTRUN_FUZZ_CHECK(r.error().size() <= rdzv::kMaxText, "error text");
  FTRUN_FUZZ_CHECK(r.check_results_size() <= 64, "check results");
  for (const auto& f : r.failures()) {
    const rdzv::WorkerFailure d = rdzv::FromWire(f);
    v1::WorkerFailure back;
    rdzv::ToWire(d, &back);
    FTRUN_FUZZ_CHECK(back.SerializeAsString() == f.SerializeAsString() ||
                         f.GetReflection()->GetUnknownFields(f).field_count() > 0,
                     "an accepted failure changed through the wire");
  }
  for (const auto& p : r.progress()) {
    FTRUN_FUZZ_CHECK(p.group().size() <= 1024, "group");
    (void)rdzv::FromWire(p);
  }
  for (const auto& c : r.check_results()) {
    const rdzv::CheckTaskResult d = rdzv::FromWire(c);
    v1::CheckTaskResult back;
    rdzv::ToWire(d, &back);
    FTRUN_FUZZ_CHECK(back.reason() == c.reason() && back.command_reason() == c.command_reason(),
                     "an accepted check result changed through the wire");
  }
}

}  // namespace

FTRUN_FUZZ_INITIALIZE()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 1 << 20) return -1;
  const int kind = data[0] % 5;
  const void* bytes = data + 1;
  const int n = static_cast<int>(size - 1);
  switch (kind) {
    case 0: {
      v1::JoinRequest m;
      if (!m.ParseFromArray(bytes, n)) return 0;
      CheckRequestHeader(m.header());
      CheckNode(m.node(), m.header().node_id());
      break;
    }
    case 1: {
      v1::WatchRequest m;
      if (!m.ParseFromArray(bytes, n)) return 0;
      CheckRequestHeader(m.header());
      (void)std::min<double>(m.wait_ms() / 1000.0, 10.0);
      break;
    }
    case 2: {
      v1::ReportRequest m;
      if (!m.ParseFromArray(bytes, n)) return 0;
      CheckRequestHeader(m.header());
      CheckReport(m);
      break;
    }
    case 3: {
      v1::NodeView m;
      if (!m.ParseFromArray(bytes, n)) return 0;
      CheckNodeView(m);
      break;
    }
    case 4: {
      v1::JobStatus m;
      if (!m.ParseFromArray(bytes, n)) return 0;
      const rdzv::JobStatus s = rdzv::FromWire(m);
      CheckNodeView(m.view());
      v1::JobStatus back;
      rdzv::ToWire(s, &back);
      FTRUN_FUZZ_CHECK(back.nodes_size() == m.nodes_size(), "nodes lost through the wire");
      break;
    }
  }
  return 0;
}
