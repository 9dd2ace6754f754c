#include "launcher/checkpoint/memfd_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ftrun::launcher {

Result<int> MemfdBuffer::Open(const std::string& name) {
  int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Error{std::string("memfd_create: ") + std::strerror(errno)};
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
    const int err = errno;
    close(fd);
    return Error{std::string("sealing the memfd: ") + std::strerror(err)};
  }
  return fd;
}

MemfdBuffer::~MemfdBuffer() {
  if (data_ != nullptr) munmap(data_, size_);
  close(fd_);
}

Status MemfdBuffer::Grow(size_t size) {
  if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    return Error{"ftruncate to " + std::to_string(size) + " bytes: " + std::strerror(errno)};
  }
  const int prot = access_ == Access::kRead ? PROT_READ : PROT_READ | PROT_WRITE;
  void* data = mmap(nullptr, size, prot, MAP_SHARED, fd_, 0);
  if (data == MAP_FAILED) {
    return Error{"mmap of " + std::to_string(size) + " bytes: " + std::strerror(errno)};
  }
  if (data_ != nullptr) munmap(data_, size_);
  data_ = data;
  size_ = size;
  return {};
}

}  // namespace ftrun::launcher
