#include "launcher/checkpoint/memfd_mappings.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ftrun::launcher {

MemfdMappings::~MemfdMappings() {
  for (auto& [ino, m] : maps_) munmap(const_cast<std::byte*>(m.data), m.size);
}

Result<std::span<const std::byte>> MemfdMappings::Map(int fd, size_t bytes) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Error{std::string("fstat: ") + std::strerror(errno)};
  auto it = maps_.find(st.st_ino);
  if (it != maps_.end() && it->second.size >= bytes) {
    return std::span<const std::byte>(it->second.data, bytes);
  }
  if (it != maps_.end()) {
    munmap(const_cast<std::byte*>(it->second.data), it->second.size);
    maps_.erase(it);
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED) {
    return Error{"mmap of " + std::to_string(bytes) + " bytes: " + std::strerror(errno)};
  }
  auto* data = static_cast<const std::byte*>(map);
  maps_[st.st_ino] = Mapping{data, bytes};
  return std::span<const std::byte>(data, bytes);
}

}  // namespace ftrun::launcher
