// TorchArchive: a memory snapshot (scripts/python/ftrun/flash_checkpoint/snapshot.py's byte
// layout: "FTRUNSN1", header JSON, the pickled state with its tensors taken out as persistent
// ids 0..n-1, the tensors' raw bytes) as the file torch.save writes, so that torch.load (and
// any tool that reads checkpoints with it) reads what the agent persisted:
//
//   archive/data.pkl     the state's pickle, each persistent id replaced by what torch.save
//                        writes for a tensor: torch._utils._rebuild_tensor_v2 of a storage
//                        ("storage", torch.<Type>Storage, "<i>", "cpu", numel), offset 0,
//                        the tensor's shape and contiguous strides, requires_grad False
//   archive/byteorder    "little"
//   archive/data/<i>     tensor i's bytes: views into the snapshot, not copied
//   archive/version      "3\n"
//
// Protocol-4/5 frames are dropped (a pickle needs none); nothing else of the pickle changes.
//
// A snapshot of several files (snapshot.py's Files: its header lists "files": [[name, offset,
// length], ...] instead of one "pickle", each a pickle of its own whose persistent ids index
// the one "tensors" list) becomes one archive per file (TorchArchives), each holding the
// tensors its pickle names, e.g. Megatron-LM's model_optim_rng.pt and distrib_optim.pt of one
// rank.
//
// Thread: any. Errors: a snapshot this cannot convert (not a snapshot, a header or pickle it
// cannot read, a dtype torch has no storage type for, a tensor outside the snapshot) is an
// Error saying why; the caller then keeps the snapshot's own format.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "launcher/checkpoint/zip_archive.h"

namespace ftrun::launcher {

struct SnapshotTensor {
  uint64_t offset = 0;
  std::string storage;  // torch's storage type: "FloatStorage", ...
  uint64_t element_size = 0;
  std::vector<int64_t> shape;
  uint64_t numel() const;
};

// torch's data.pkl from a snapshot's pickle whose persistent ids index `tensors`; `used`
// (when given) gets the indices the pickle names, in its order.
Result<std::string> TorchPickle(std::span<const std::byte> pickle,
                                const std::vector<SnapshotTensor>& tensors,
                                std::vector<size_t>* used = nullptr);

// The archive of `snapshot`, which must outlive it (the tensors' data are views). A snapshot
// of several files is an error here.
Result<ZipArchive> TorchArchive(std::span<const std::byte> snapshot, bool force_zip64 = false);

// One file of a snapshot: its name ("" for the one file of a snapshot of one state) and its
// archive (views into the snapshot, which must outlive it).
struct TorchFile {
  std::string name;
  ZipArchive archive;
};
// The archives of `snapshot`: one unnamed for a snapshot of one state, one per file (named as
// the header names them, unchecked) for a snapshot of several.
Result<std::vector<TorchFile>> TorchArchives(std::span<const std::byte> snapshot,
                                             bool force_zip64 = false);

}  // namespace ftrun::launcher
