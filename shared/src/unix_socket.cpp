#include "iris/shared/unix_socket.hpp"

#include "iris/shared/os_error.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace iris::net {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

int Fd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

namespace {

sockaddr_un make_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path))
    throw Error(ErrorCode::kInvalidArgument, "socket path too long (max " +
                                                 std::to_string(sizeof(addr.sun_path) - 1) +
                                                 " bytes): " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

bool wait_readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

bool recv_exact(int fd, char* out, std::size_t n, int timeout_ms) {
  while (n > 0) {
    if (!wait_readable(fd, timeout_ms)) return false;
    ssize_t r = ::recv(fd, out, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    out += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Frames are a 4-byte little-endian length, then the payload.
uint32_t frame_length(const char* header) {
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= uint32_t{static_cast<unsigned char>(header[i])} << (8 * i);
  return len;
}

// One recvmsg (EINTR retried) that also takes the descriptors sent with the bytes. Returns what
// recvmsg returned; `cut` says the kernel dropped descriptors (more than fit the control space).
ssize_t receive_with_fds(int fd, char* data, std::size_t size, std::size_t max_fds, int flags,
                         std::vector<Fd>& fds, bool& cut) {
  iovec iov{data, size};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (max_fds == 0 ? 1 : max_fds)));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t r;
  do {
    r = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | flags);
  } while (r < 0 && errno == EINTR);
  cut = r > 0 && (msg.msg_flags & MSG_CTRUNC) != 0;
  if (r <= 0) return r;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(received);
    }
  }
  return r;
}

}  // namespace

Fd listen_unix(const std::string& path, mode_t mode, const std::string& group_name) {
  sockaddr_un addr = make_address(path);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));  // accept loops
  if (!fd) throw os_error("socket()");
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw os_error("cannot bind " + path);
  if (!group_name.empty()) {
    const ::group* g = ::getgrnam(group_name.c_str());
    if (g == nullptr) {
      ::unlink(path.c_str());
      throw Error(ErrorCode::kInvalidArgument, "socket group '" + group_name + "' does not exist");
    }
    if (::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      ::unlink(path.c_str());
      throw os_error("cannot set group of " + path + " to " + group_name);
    }
  }
  if (::chmod(path.c_str(), mode) != 0) {
    ::unlink(path.c_str());
    throw os_error("cannot chmod " + path);
  }
  if (::listen(fd.get(), 128) != 0) throw os_error("cannot listen on " + path);
  return fd;
}

Fd connect_unix(const std::string& path) {
  sockaddr_un addr = make_address(path);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw os_error("socket()");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    throw os_error("cannot connect to " + path);
  return fd;
}

PeerCredentials peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) throw os_error("SO_PEERCRED");
  return {cred.pid, cred.uid, cred.gid};
}

bool send_frame(int fd, const std::string& payload, const std::vector<int>& fds) {
  if (payload.size() > kMaxFrameBytes) return false;
  std::string frame(4, '\0');
  const auto len = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  frame += payload;

  iovec iov{frame.data(), frame.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  std::size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t r = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    sent += static_cast<std::size_t>(r);
    iov.iov_base = frame.data() + sent;
    iov.iov_len = frame.size() - sent;
    msg.msg_control = nullptr;  // descriptors go with the first bytes only
    msg.msg_controllen = 0;
  }
  return true;
}

std::optional<Frame> recv_frame(int fd, std::chrono::milliseconds timeout, std::size_t max_fds) {
  const int timeout_ms = static_cast<int>(timeout.count());
  if (!wait_readable(fd, timeout_ms)) return std::nullopt;
  char header[4];
  Frame frame;
  bool cut = false;
  const ssize_t r = receive_with_fds(fd, header, sizeof(header), max_fds, 0, frame.fds, cut);
  if (r <= 0 || cut || frame.fds.size() > max_fds) return std::nullopt;
  if (r < 4 && !recv_exact(fd, header + r, static_cast<std::size_t>(4 - r), timeout_ms))
    return std::nullopt;
  const uint32_t len = frame_length(header);
  if (len > kMaxFrameBytes) return std::nullopt;
  frame.payload.resize(len);
  if (len > 0 && !recv_exact(fd, frame.payload.data(), len, timeout_ms)) return std::nullopt;
  return frame;
}

FrameReader::Status FrameReader::read_some(int fd) {
  char chunk[16384];
  for (;;) {
    bool cut = false;
    const ssize_t r = receive_with_fds(fd, chunk, sizeof(chunk), max_fds_, MSG_DONTWAIT, fds_, cut);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::kOpen;
    if (r <= 0) return Status::kClosed;
    if (cut || fds_.size() > max_fds_) return Status::kBad;
    buffer_.append(chunk, static_cast<std::size_t>(r));
    if (buffer_.size() >= 4 && frame_length(buffer_.data()) > kMaxFrameBytes) return Status::kBad;
    // More than one whole frame buffered: a peer that does not wait for its answers.
    if (buffer_.size() > 2 * (kMaxFrameBytes + 4)) return Status::kBad;
  }
}

std::optional<Frame> FrameReader::next() {
  if (buffer_.size() < 4) return std::nullopt;
  const uint32_t len = frame_length(buffer_.data());
  if (buffer_.size() < 4 + std::size_t{len}) return std::nullopt;
  Frame frame;
  frame.payload = buffer_.substr(4, len);
  buffer_.erase(0, 4 + std::size_t{len});
  frame.fds = std::move(fds_);
  fds_.clear();
  return frame;
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0) return true;
  char c;
  ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0;
}

}  // namespace iris::net
