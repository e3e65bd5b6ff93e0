#include "iris/shared/shm_segment.hpp"

#include <dirent.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

namespace bip = boost::interprocess;

namespace iris::shm {

std::string segment_prefix(const std::string& socket_path) {
  const auto hash = std::hash<std::string>{}(socket_path);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "irisd-%08x.", static_cast<unsigned>(hash & 0xffffffffu));
  return buf;
}

struct ShmSegment::Impl {
  std::string name;
  bip::mapped_region region;
};

ShmSegment::ShmSegment() = default;
ShmSegment::ShmSegment(ShmSegment&&) noexcept = default;
ShmSegment& ShmSegment::operator=(ShmSegment&&) noexcept = default;
ShmSegment::~ShmSegment() = default;

ShmSegment ShmSegment::create(const std::string& name, std::size_t bytes, uid_t owner_uid) {
  try {
    bip::permissions perms(0600);
    bip::shared_memory_object object(bip::create_only, name.c_str(), bip::read_write, perms);
    const int fd = object.get_mapping_handle().handle;
    if (geteuid() == 0 && owner_uid != 0 && fchown(fd, owner_uid, static_cast<gid_t>(-1)) != 0) {
      const std::string reason = std::strerror(errno);
      bip::shared_memory_object::remove(name.c_str());
      throw std::runtime_error("chown of shared memory " + name + " failed: " + reason);
    }
    object.truncate(static_cast<bip::offset_t>(bytes));
    ShmSegment s;
    s.impl_ = std::make_unique<Impl>();
    s.impl_->name = name;
    s.impl_->region = bip::mapped_region(object, bip::read_write);
    return s;
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    throw std::runtime_error("cannot create shared memory " + name + " of " +
                             std::to_string(bytes) + " bytes: " + e.what() +
                             " (is /dev/shm full or too small?)");
  }
}

ShmSegment ShmSegment::open(const std::string& name) {
  try {
    bip::shared_memory_object object(bip::open_only, name.c_str(), bip::read_write);
    ShmSegment s;
    s.impl_ = std::make_unique<Impl>();
    s.impl_->name = name;
    s.impl_->region = bip::mapped_region(object, bip::read_write);
    return s;
  } catch (const bip::interprocess_exception& e) {
    throw std::runtime_error("cannot open shared memory " + name + ": " + e.what());
  }
}

bool ShmSegment::remove(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

std::size_t ShmSegment::remove_with_prefix(const std::string& prefix) {
  std::size_t removed = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (dirent* e = readdir(dir)) {
    const std::string entry = e->d_name;
    if (entry.rfind(prefix, 0) == 0 && remove(entry)) ++removed;
  }
  closedir(dir);
  return removed;
}

void* ShmSegment::data() const { return impl_ ? impl_->region.get_address() : nullptr; }
std::size_t ShmSegment::size() const { return impl_ ? impl_->region.get_size() : 0; }
const std::string& ShmSegment::name() const {
  static const std::string empty;
  return impl_ ? impl_->name : empty;
}

}  // namespace iris::shm
