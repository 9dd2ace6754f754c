// FlashService: the agent's end of flash checkpoint (ftrun-flash-checkpoint(7)). It answers
// the workers' snapshot requests on the control channel out of the SnapshotStore (memory the
// agent owns, so a snapshot outlives the worker that wrote it) and hands snapshots to the
// SnapshotPersister (storage, off the loop).
//
// The steps of a save: "snapshot_begin" -> Begin leases a buffer (its memfd goes to the
// worker with the answer; a lease asked for ahead of the next save is answered in the rank's
// lease mailbox instead, lease_mailbox.h) -> the worker copies its state in -> "snapshot_commit" ->
// the snapshot is the newest of its copy; with `persist` it is also queued for storage now,
// otherwise only if the job ends in failure (PersistForExit) or, under dlrover-run's
// --save-at-breakpoint, when the workers stop for a restart (PersistAtBreakpoint). A restore:
// "snapshot_steps" (which steps of a copy are complete here, and the step the rendezvous decided
// the round restores: SetRestoreStep) -> "snapshot_get" hands the buffer over for reading.
//
// Every-step saves of the one copy: a lease asked for ahead with `loan` may come with a loan
// of both of the rank's buffers (lease_mailbox.h, SnapshotStore::Lend): the worker's next saves
// send nothing, and the agent reclaims the buffers, taking the newest save the worker recorded
// as a commit, before anything else the rank asks about snapshots, when it exits, and before
// the snapshots are persisted for a failed job. Lent only when the rank's last save named a
// checkpoint directory and was not to be persisted at once, and while SetLending allows it
// (FTRUN_FLASH_LOAN): a lent rank's snapshot cannot be read. Replicas are of shards, never
// lent.
//
// Checksums: at each commit the snapshot's CRC-32C is computed off the loop
// (SnapshotChecksummer) and kept with it (SnapshotMeta::checksum). "snapshot_get" checks the
// bytes against it (off the loop) before handing them over: a snapshot changed in memory
// since its commit is skipped with a warning naming it, and the next source of that step is
// tried (another local rank's copy, then a replica held here); with none left the request is
// refused and the worker falls back to disk. A snapshot whose checksum is not known yet is
// checked once it is (the checks run in order after the commit's); one that has none is
// handed over unchecked.
//
// A copy is named by its group (snapshot_store.h): "" is the one copy of a data-parallel job
// (saved by local rank 0), "rank-<r>" rank r's shard. Requests look the group up in every local
// rank's snapshots, so a shard is found wherever its rank ran on this node before.
//
// Persisting (flash_service_persist.cc): one snapshot per checkpoint for a copy ""; a shard is
// persisted once the shards of every rank (its world size) of that step are here, all in one
// checkpoint. When the job fails and its shards span nodes (world size above the local ranks),
// every agent stages the shards it holds of every step (its own, and replicas of other nodes'
// shards of the same step) with StageShards (staged_checkpoint.h): a step becomes a checkpoint once
// the agents have stored all its shards between them. A replica's shard is stored under the
// file name its own rank gave it with its save (the copy carries it, replica.proto). A step already
// written is not written again. While a snapshot is being persisted its buffer is pinned: a save
// that would need it is refused with busy=true (a MEMORY save is skipped, a DISK save retries).
//
// Thread: loop only. Ownership: owns the store and the persister; `send` (the control
// channel's Send) must outlive it. Errors: every request is answered; failures are answers
// that name the culprit, and failed persists are logged. None escape.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ftrun/v1/control.pb.h"
#include "launcher/checkpoint/lease_mailbox.h"
#include "launcher/checkpoint/snapshot_checksummer.h"
#include "launcher/checkpoint/snapshot_persister.h"
#include "launcher/checkpoint/snapshot_store.h"
#include "launcher/replica/replica_store.h"

namespace ftrun::launcher {

class FlashService {
 public:
  // Sends a JSON message to a local rank, with a descriptor when fd >= 0 (duplicated by the
  // sender); false when the rank is not connected.
  using Send = std::function<bool(int local_rank, const std::string& json, int fd)>;

  // The file name of a snapshot whose save names none.
  static constexpr const char* kDefaultFileName = "state.bin";

  // run_started: when this run began (the agent's start); what is under a checkpoint
  // directory from before it is an earlier run's (CheckpointRequest::run_started). Shards
  // that several nodes' agents store together (StageShards) get it only once the job's start
  // is known (SetJobRunStarted): by their own starts, a late-joined agent would take this
  // run's steps for an earlier run's.
  FlashService(boost::asio::io_context& io, int local_ranks, uint64_t budget_bytes,
               std::chrono::system_clock::time_point run_started, Send send);
  ~FlashService();
  FlashService(const FlashService&) = delete;
  FlashService& operator=(const FlashService&) = delete;

  void Begin(int local_rank, const v1::ControlSnapshotBegin& request);
  void Commit(int local_rank, const v1::ControlSnapshotCommit& request);
  void Steps(int local_rank, const v1::ControlSnapshotSteps& request);
  void Get(int local_rank, const v1::ControlSnapshotGet& request);
  // Hands the rank its lease mailbox (created on first use, cleared for each request): from
  // then on a "snapshot_begin" with `mailbox` is answered there instead of on the channel.
  void Mailbox(int local_rank, const v1::ControlSnapshotMailbox& request);

  // When this run of the job began, from the rendezvous (the earliest start of its agents):
  // from now on for every write, shards stored together with other nodes included.
  void SetJobRunStarted(std::chrono::system_clock::time_point run_started) {
    run_started_ = run_started;
    job_run_started_ = true;
  }

  // The rank's worker is gone: its unfinished save is abandoned (the newest snapshot stays).
  void WorkerExited(int local_rank);

  // The job ends in failure: the newest complete snapshot of every copy that has a target is
  // persisted, unless that step is already stored; shards of a multi-node job are staged
  // (every complete step held here, newest first). `done` runs on the loop once everything
  // queued is written (or failed); the loop is kept running until then.
  void PersistForExit(std::function<void()> done);
  // This node's workers stopped for a restart and the job goes on (dlrover-run's
  // --save-at-breakpoint): PersistForExit's writes of what this agent can store whole, in
  // the background, the one copy only when `one_copy` (one node of a job writes it: the
  // node of group rank 0, as DISK saves). Not staged with other agents: shards spanning
  // nodes (their steps may differ between nodes at a breakpoint; the round restores the one
  // they share) are written when the job fails. Skipped while earlier writes are in flight,
  // as DLRover's saver does, so that repeated restarts never queue writes or pin buffers.
  void PersistAtBreakpoint(bool one_copy);

  // Copies of other nodes' shards this agent keeps (flash checkpoint replicas; null: none):
  // "snapshot_steps" and "snapshot_get" also answer out of them, so a rank whose own node
  // lost its shard can be served it by a rank on the node holding the copy.
  // REQUIRES: `replicas` outlives this service.
  void SetReplicas(const ReplicaStore* replicas) { replicas_ = replicas; }
  // The round's restore step from the rendezvous (the one copy's, the shards'; -1: none,
  // nullopt: undecided): "snapshot_steps" answers carry it as "restore_step", and the
  // workers restore that step instead of agreeing on one among themselves.
  void SetRestoreStep(std::optional<int64_t> copy, std::optional<int64_t> shards) {
    restore_copy_ = copy;
    restore_shards_ = shards;
  }

  // Whether buffers may be lent for every-step saves (default: yes).
  void SetLending(bool allowed) { lending_ = allowed; }
  // Runs (on the loop) when a save made under a loan becomes the rank's newest snapshot, as
  // a commit does.
  void SetOnReclaimed(std::function<void(int local_rank, uint64_t step)> f) {
    on_reclaimed_ = std::move(f);
  }
  // The step of the rank's newest snapshot, also while its buffers are lent (then the newest
  // save recorded, which the agent has not taken back yet: for reports only).
  std::optional<uint64_t> NewestStep(int local_rank) const;

  // Persists queued or being written (for tests and metrics).
  int persists_in_flight() const { return in_flight_; }
  const SnapshotStore& store() const { return store_; }

 private:
  void Refuse(int local_rank, int64_t id, int64_t step, const std::string& error, bool busy);
  // Ends the rank's loan, if any, with the newest save its worker recorded (then checksummed
  // as a commit is).
  void Reclaim(int local_rank);
  // Lends the rank's buffers with the lease just begun, when allowed; false: lease only.
  bool MaybeLend(int local_rank, const v1::ControlSnapshotBegin& request, LeaseMailbox& mailbox,
                 int lease_fd);
  // Queues the checkpoint of `view`'s copy at its step, if it is complete and not stored yet.
  void MaybePersist(const SnapshotView& view, const std::string& reason);
  // Queues the newest complete snapshot of every local rank's copy that has a target (the
  // one copy only when `one_copy`); false when no rank holds any. `reason` goes into the
  // logs and the requests.
  bool PersistNewest(const std::string& reason, bool one_copy);
  // Stages the shards held here (own and replicas) of every step of a job whose shards span
  // nodes, so that the agents together store each step whose shards they hold between them.
  void PersistShared(const std::string& reason);
  // Queues `request` with the persister; `key` records its step as stored (until it fails).
  void Enqueue(const std::string& key, CheckpointRequest request);
  // `shared`: shards of a multi-node step, which other agents may complete.
  void Persisted(const std::string& key, const std::string& root, uint64_t step, bool shared,
                 Result<std::string> outcome);
  std::optional<SnapshotView> Find(const std::string& group, uint64_t step) const;
  // Where a "snapshot_get" may be served from, in order; the next is tried when one is corrupt.
  struct Source {
    std::optional<SnapshotView> own;
    std::optional<ReplicaView> replica;
  };
  void HandOver(int local_rank, int64_t id, const std::string& group, uint64_t step,
                std::shared_ptr<std::vector<Source>> sources, size_t next);

  boost::asio::io_context& io_;
  std::chrono::system_clock::time_point run_started_;
  bool job_run_started_ = false;  // run_started_ is the job's (SetJobRunStarted)
  Send send_;
  SnapshotStore store_;
  // Newest step stored (or being stored) per checkpoint key (the copy "" or "sharded").
  std::map<std::string, uint64_t> stored_;
  // By checkpoint directory: the newest failed write there, until a newer one succeeds.
  struct Failure {
    uint64_t step = 0;
    std::string error;
  };
  std::map<std::string, Failure> failed_;
  std::map<int, std::string> begun_group_;  // the group of each rank's save in progress
  std::map<int, std::unique_ptr<LeaseMailbox>> mailboxes_;  // by local rank
  std::map<int, bool> persisting_;  // whether the rank's last commit asked to be persisted
  bool lending_ = true;
  bool said_no_snapshots_ = false;  // PersistAtBreakpoint said so once
  std::function<void(int, uint64_t)> on_reclaimed_;
  int in_flight_ = 0;
  const ReplicaStore* replicas_ = nullptr;
  std::optional<int64_t> restore_copy_, restore_shards_;
  std::vector<std::function<void()>> on_idle_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> busy_;
  SnapshotChecksummer checksummer_;
  SnapshotPersister persister_;  // last: its thread stops first
};

}  // namespace ftrun::launcher
