// MemfdMappings: one thread's own read-only mappings of snapshot and replica memfds, so that
// thread reads a buffer without pinning it and without touching the store's mapping (which a
// Begin that grows the buffer replaces on the loop). Kept from read to read, by inode: the
// stores reuse their buffers, so the page tables are built once (MAP_POPULATE: in one call,
// not a fault per page).
//
// A mapping keeps its memfd's memory alive after the store lets go of the descriptor, as the
// stores do anyway (they never drop a buffer while the agent runs).
//
// Thread: one thread per instance (not thread-safe). Ownership: owns the mappings, unmapped by
// the destructor. Errors: Map's Result names the system call and errno's text.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <map>
#include <span>

#include "common/result.h"

namespace ftrun::launcher {

class MemfdMappings {
 public:
  MemfdMappings() = default;
  ~MemfdMappings();
  MemfdMappings(const MemfdMappings&) = delete;
  MemfdMappings& operator=(const MemfdMappings&) = delete;

  // The first `bytes` bytes of the memfd `fd` (borrowed: only read here), valid until the next
  // Map of the same memfd with more bytes, or the destructor.
  Result<std::span<const std::byte>> Map(int fd, size_t bytes);

 private:
  struct Mapping {
    const std::byte* data = nullptr;
    size_t size = 0;
  };
  std::map<ino_t, Mapping> maps_;
};

}  // namespace ftrun::launcher
