// LocalCoordinator: the job of a single node (--nnodes 1, --standalone). Rounds form at once;
// a failure restarts the group while restarts remain (TORCHELASTIC_RESTART_COUNT + 1), else
// the job fails. Workers' MASTER_PORT is a port that is free when each round starts.
//
// Thread: loop only. Listener calls are posted.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "launcher/coordinator.h"

namespace ftrun::launcher {

struct LocalCoordinatorOptions {
  int nproc_per_node = 1;
  int max_restarts = 0;
  std::string master_addr;  // what workers get as MASTER_ADDR
  std::string role = "default";
};

class LocalCoordinator : public Coordinator {
 public:
  LocalCoordinator(boost::asio::io_context& io, LocalCoordinatorOptions options);

  void Start(Listener* listener) override;
  void WorkersFailed(const std::vector<WorkerFailure>& failures) override;
  void WorkersSucceeded() override;
  void WorkersStopped() override;
  void Shutdown() override;

 private:
  void StartRound();
  template <class F>
  void Post(F f);

  boost::asio::io_context& io_;
  LocalCoordinatorOptions opts_;
  Listener* listener_ = nullptr;
  uint64_t round_ = 0;
  int restart_count_ = 0;
  bool restart_pending_ = false;
  bool finished_ = false;
  std::vector<WorkerFailure> failures_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ftrun::launcher
