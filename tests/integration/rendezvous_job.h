// Helpers of the rendezvous trust tests (rendezvous_*_test.cc): a 2-node dynamic job of fake
// workers that record their attempt and wait for a file, and the requests an outsider makes.
#pragma once

#include <string>
#include <vector>

#include "ftrun/v1/rendezvous.pb.h"
#include "rendezvous/wire.h"
#include "tests/support/test_support.h"

namespace ftrun::testing {

// One agent of a 2-node job at endpoint_host:port, one worker that appends to dir/records
// and exits once dir/done exists. `conf`: the whole --rdzv-conf.
inline std::vector<std::string> TwoNodeAgent(const TempDir& dir, const std::string& endpoint,
                                             const std::string& conf) {
  return {"--log-dir",        dir / "logs",
          "--nproc-per-node", "1",
          "--nnodes",         "2",
          "--rdzv-backend",   "c10d",
          "--rdzv-endpoint",  endpoint,
          "--rdzv-id",        "job",
          "--rdzv-conf",      conf,
          "--no-python",      FakeWorkerBinary(),
          "record",           dir / "records",
          "wait-file",        dir / "done"};
}

// Lines of dir/records holding `needle`.
inline int CountRecords(const TempDir& dir, const std::string& needle) {
  int n = 0;
  for (const auto& l : Lines(ReadFile(dir / "records"))) n += l.find(needle) != std::string::npos;
  return n;
}

// A request header for job "job" in `node`'s name.
inline v1::RequestHeader OutsiderHeader(const std::string& node, const std::string& secret,
                                        const std::string& token = "") {
  v1::RequestHeader h;
  h.set_protocol_version(rendezvous::kProtocolVersion);
  h.set_run_id("job");
  h.set_node_id(node);
  h.set_node_secret(secret);
  h.set_token(token);
  return h;
}

}  // namespace ftrun::testing
