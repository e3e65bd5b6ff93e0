#include "iris/shared/shm_segment.hpp"

#include "iris/shared/os_error.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace iris::shm {

namespace {
constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

void* map_whole(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw os_error("mmap of a shared-memory segment of " + std::to_string(bytes) + " bytes");
  return p;
}
}  // namespace

ShmSegment::ShmSegment(net::Fd fd, void* data, std::size_t size)
    : fd_(std::move(fd)), data_(data), size_(size) {}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : fd_(std::move(o.fd_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) ::munmap(data_, size_);
    fd_ = std::move(o.fd_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

ShmSegment ShmSegment::create(const std::string& label, std::size_t bytes) {
  if (bytes == 0)
    throw Error(ErrorCode::kInvalidArgument, "a shared-memory segment needs at least 1 byte");
  net::Fd fd(::memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) throw os_error("memfd_create(" + label + ")");
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    throw os_error("cannot size shared memory " + label + " to " + std::to_string(bytes) +
                   " bytes (memory limit of irisd's cgroup?)");
  if (::fcntl(fd.get(), F_ADD_SEALS, kSeals) != 0) throw os_error("sealing shared memory " + label);
  void* data = map_whole(fd.get(), bytes);
  return ShmSegment(std::move(fd), data, bytes);
}

ShmSegment ShmSegment::map(net::Fd fd, std::size_t max_bytes) {
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    throw Error(ErrorCode::kInvalidArgument,
                "the shared memory is not a memfd sealed against shrinking");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw os_error("fstat of shared memory");
  const auto bytes = static_cast<std::size_t>(st.st_size);
  if (bytes == 0 || bytes > max_bytes)
    throw Error(ErrorCode::kInvalidArgument, "the shared memory holds " + std::to_string(bytes) +
                                                 " bytes, expected 1 to " +
                                                 std::to_string(max_bytes));
  void* data = map_whole(fd.get(), bytes);
  return ShmSegment(std::move(fd), data, bytes);
}

}  // namespace iris::shm
