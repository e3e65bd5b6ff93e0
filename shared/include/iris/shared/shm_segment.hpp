// A named POSIX shared-memory segment, created or opened with Boost.Interprocess and mapped
// whole. Used for session segments and host buffers; never for allocators or mutexes.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

namespace iris::shm {

// Prefix of every shared-memory name the irisd serving `socket_path` creates: daemons on different
// sockets never touch each other's segments, and a restarted one finds its predecessor's.
std::string segment_prefix(const std::string& socket_path);

class ShmSegment {
 public:
  // Creates `name` (fails if it exists) with mode 0600, owned by `owner_uid` when the caller may
  // chown (root), zero-filled, and maps it. Throws std::runtime_error with the OS reason.
  static ShmSegment create(const std::string& name, std::size_t bytes, uid_t owner_uid);
  // Opens an existing segment read-write and maps all of it.
  static ShmSegment open(const std::string& name);
  // Removes a name; mappings stay valid until unmapped. Returns false when it did not exist.
  static bool remove(const std::string& name);
  // Removes every segment whose name starts with `prefix` (stale ones of a dead daemon).
  static std::size_t remove_with_prefix(const std::string& prefix);

  ShmSegment();
  ShmSegment(ShmSegment&&) noexcept;
  ShmSegment& operator=(ShmSegment&&) noexcept;
  ~ShmSegment();

  void* data() const;
  std::size_t size() const;
  const std::string& name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace iris::shm
