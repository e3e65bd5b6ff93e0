// Plain Unix stream sockets for the attach handshake: framed messages (4-byte little-endian
// length, then bytes), optional file descriptors beside them (SCM_RIGHTS), and the peer's
// credentials from the kernel (SO_PEERCRED).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace iris::net {

inline constexpr std::size_t kMaxFrameBytes = 1 << 20;

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct PeerCredentials {
  pid_t pid;
  uid_t uid;
  gid_t gid;
};

// Listens on `path` (must not exist) with the given mode and, when group is not empty, group.
// Throws iris::Error (os_error.hpp) naming the path and the OS reason.
Fd listen_unix(const std::string& path, mode_t mode, const std::string& group);
// Connects; throws iris::Error (kUnavailable when nothing listens, kPermissionDenied) when it
// cannot.
Fd connect_unix(const std::string& path);
PeerCredentials peer_credentials(int fd);

// Sends one frame and, when fds is not empty, the descriptors with it. Returns false on error.
bool send_frame(int fd, const std::string& payload, const std::vector<int>& fds = {});
// Receives one frame with up to `max_fds` descriptors. nullopt on EOF, error, timeout, or a
// frame over kMaxFrameBytes.
struct Frame {
  std::string payload;
  std::vector<Fd> fds;
};
std::optional<Frame> recv_frame(int fd, std::chrono::milliseconds timeout, std::size_t max_fds = 4);

// Reassembles frames from a non-blocking socket as its bytes arrive, so that one slow or silent
// peer never holds up a thread serving many (irisd's attach listener).
class FrameReader {
 public:
  explicit FrameReader(std::size_t max_fds) : max_fds_(max_fds) {}
  enum class Status { kOpen, kClosed, kBad };
  // Reads whatever the socket holds now, never blocking. kClosed on EOF or a socket error; kBad
  // for a frame over kMaxFrameBytes or more descriptors than allowed.
  Status read_some(int fd);
  // The next whole frame received, with the descriptors that arrived since the last one.
  std::optional<Frame> next();

 private:
  std::size_t max_fds_;
  std::string buffer_;
  std::vector<Fd> fds_;
};

// True when the peer has closed its end (checked without blocking).
bool peer_closed(int fd);

}  // namespace iris::net
