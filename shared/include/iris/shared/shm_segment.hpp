// Shared memory between irisd and one client: a memfd irisd creates, seals against shrinking
// and growing before anyone else sees it, and hands to the client as a file descriptor over the
// attach connection. Sealed, no client can make irisd's mapping fault (SIGBUS) by truncating it;
// unnamed, no other user can open, pre-create or squat it. Mapped whole; used for session
// segments and host buffers, never for allocators or mutexes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "iris/shared/unix_socket.hpp"

namespace iris::shm {

class ShmSegment {
 public:
  // irisd: a zero-filled, sealed memfd of `bytes`, mapped read-write. `label` names it in
  // /proc/<pid>/maps ("memfd:<label>"). Throws iris::Error (os_error.hpp) with the OS reason.
  static ShmSegment create(const std::string& label, std::size_t bytes);
  // Maps a segment the other side sent (irisd's to a client; a resuming client's back to a new
  // irisd), keeping its descriptor (a client hands it to the next irisd after a restart). Throws
  // iris::Error (kInvalidArgument) when it is no memfd sealed against shrinking, or larger than `max_bytes`.
  static ShmSegment map(net::Fd fd, std::size_t max_bytes = SIZE_MAX);

  ShmSegment() = default;
  ShmSegment(ShmSegment&&) noexcept;
  ShmSegment& operator=(ShmSegment&&) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  // irisd: hands over the memfd, to send to the client (the mapping stays without it).
  net::Fd take_fd() { return std::move(fd_); }
  // The memfd, while this side keeps it (-1 after take_fd).
  int fd() const { return fd_.get(); }

 private:
  ShmSegment(net::Fd fd, void* data, std::size_t size);
  net::Fd fd_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace iris::shm
