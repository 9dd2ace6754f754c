#include "launcher/replica/replica_store.h"

#include <sys/mman.h>

#include <utility>

#include "common/log.h"
#include "launcher/checkpoint/memfd_buffer.h"

namespace ftrun::launcher {

// A replica's memory, written here as the copy arrives (a worker reading it gets the
// descriptor: the seal keeps it from shrinking the memfd under us).
class ReplicaBuffer : public MemfdBuffer {
 public:
  using MemfdBuffer::MemfdBuffer;
};

std::span<std::byte> ReplicaWrite::data() const { return {buffer->data(), bytes}; }
void ReplicaWrite::PopulateIfFresh() const {
  if (fresh) madvise(buffer->data(), bytes, MADV_POPULATE_WRITE);
}
std::span<const std::byte> ReplicaView::data() const { return {buffer->data(), bytes}; }
int ReplicaView::fd() const { return buffer->fd(); }

ReplicaStore::ReplicaStore(uint64_t budget_bytes) : budget_(budget_bytes) {}
ReplicaStore::~ReplicaStore() = default;

Result<ReplicaWrite> ReplicaStore::Begin(const std::string& group, uint64_t step, size_t bytes,
                                         const std::string& from, const std::string& name,
                                         const std::string& part_link) {
  const std::string what =
      "replica of " + group + " at step " + std::to_string(step) + " from " + from;
  if (bytes == 0) return Error{what + ": a replica needs at least one byte"};
  Group& g = groups_[group];
  if (g.writing) return Error{what + ": a copy of " + group + " is already arriving"};
  Slot& slot = g.slots[WriteSlot(g)];
  if (slot.buffer && slot.buffer.use_count() > 1) {
    return Error{what + ": its buffer still holds step " + std::to_string(slot.step) +
                 ", which is being read"};
  }
  const size_t have = slot.buffer ? slot.buffer->size() : 0;
  const bool fresh = bytes > have;
  if (fresh) {
    const uint64_t after = reserved_ - have + bytes;
    if (after > budget_ || bytes > budget_) {
      return Error{what + ": " + std::to_string(bytes) +
                   " bytes do not fit in the replica memory budget of " + std::to_string(budget_) +
                   " bytes (" + std::to_string(reserved_ - have) +
                   " bytes already hold other replicas); raise --flash-memory-budget "
                   "(FTRUN_FLASH_MEMORY_BUDGET)"};
    }
    if (!slot.buffer) {
      auto created = NewMemfdBuffer<ReplicaBuffer>("ftrun-replica-" + group, bytes,
                                                   MemfdBuffer::Access::kReadWrite);
      if (!created) return created.error().Wrap(what);
      slot.buffer = std::move(*created);
    } else if (auto grown = slot.buffer->Grow(bytes); !grown) {
      return grown.error().Wrap(what);
    }
    reserved_ = after;
  }
  slot.complete = false;  // the older replica it held is being overwritten
  slot.step = step;
  slot.bytes = bytes;
  slot.from = from;
  slot.name = name;
  slot.part_link = part_link;
  g.writing = next_id_++;
  return ReplicaWrite{.id = *g.writing,
                      .group = group,
                      .step = step,
                      .bytes = bytes,
                      .buffer = slot.buffer,
                      .fresh = fresh};
}

ReplicaStore::Group* ReplicaStore::Writing(uint64_t id, std::string* name) {
  for (auto& [group, g] : groups_) {
    if (g.writing == id) {
      *name = group;
      return &g;
    }
  }
  return nullptr;
}

Status ReplicaStore::Finish(uint64_t id, uint32_t sent, uint32_t received) {
  std::string group;
  Group* g = Writing(id, &group);
  if (g == nullptr) return Error{"no replica copy " + std::to_string(id) + " is arriving"};
  g->writing.reset();
  const int index = WriteSlot(*g);
  Slot& slot = g->slots[index];
  if (sent != received) {
    return Error{"replica of " + group + " at step " + std::to_string(slot.step) + " from " +
                 slot.from + " arrived with checksum " + std::to_string(received) +
                 ", not the sender's " + std::to_string(sent) +
                 "; dropped (the previous replica is kept)"};
  }
  slot.crc32c = received;
  slot.complete = true;
  g->newest = index;
  LauncherLog()->debug("replica of {} at step {} complete ({} bytes from {})", group, slot.step,
                       slot.bytes, slot.from);
  return {};
}

void ReplicaStore::Abort(uint64_t id) {
  std::string group;
  if (Group* g = Writing(id, &group); g != nullptr) g->writing.reset();
}

std::vector<ReplicaView> ReplicaStore::Complete(const std::string& group) const {
  std::vector<ReplicaView> views;
  auto it = groups_.find(group);
  if (it == groups_.end() || it->second.newest < 0) return views;
  const Group& g = it->second;
  auto view = [&](const Slot& s) {
    return ReplicaView{.group = group,
                       .step = s.step,
                       .bytes = s.bytes,
                       .from = s.from,
                       .name = s.name,
                       .part_link = s.part_link,
                       .crc32c = s.crc32c,
                       .buffer = s.buffer};
  };
  views.push_back(view(g.slots[g.newest]));
  const Slot& older = g.slots[1 - g.newest];
  if (older.complete && !g.writing) views.push_back(view(older));
  return views;
}

std::vector<std::string> ReplicaStore::Groups() const {
  std::vector<std::string> names;
  for (const auto& [name, g] : groups_) {
    if (g.newest >= 0) names.push_back(name);
  }
  return names;
}

}  // namespace ftrun::launcher
