#include "daemon/front/attach_listener.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/front/wire.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

namespace {
constexpr auto kHandshakeTimeout = std::chrono::milliseconds(500);

void add_to_epoll(int epoll_fd, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
}

void send_error(int fd, ErrorCode code, const std::string& message) {
  v1::AttachResponse response;
  response.set_error_code(static_cast<uint32_t>(code));
  response.set_error_message(message);
  response.set_protocol_version(kProtocolVersion);
  response.set_daemon_version(std::string(release_version()));
  net::send_frame(fd, response.SerializeAsString());
}
}  // namespace

AttachListener::AttachListener(const Config& config, Runtime& runtime, ProgressLoop& loop)
    : config_(config),
      runtime_(runtime),
      loop_(loop),
      listen_fd_(
          net::listen_unix(config.attach_socket_path(), config.socket_mode, config.socket_group)),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)) {
  if (!epoll_fd_ || !stop_fd_)
    throw std::runtime_error(std::string("attach listener: ") + std::strerror(errno));
  add_to_epoll(epoll_fd_.get(), listen_fd_.get());
  add_to_epoll(epoll_fd_.get(), stop_fd_.get());
}

AttachListener::~AttachListener() {
  stop();
  ::unlink(config_.attach_socket_path().c_str());
}

void AttachListener::start() {
  thread_ = std::thread([this] { run(); });
}

void AttachListener::stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(stop_fd_.get(), &one, sizeof(one));
  thread_.join();
}

void AttachListener::run() {
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, 64, -1);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_.get()) return;
      if (fd == listen_fd_.get()) {
        accept_all();
      } else {
        on_readable(fd);
      }
    }
  }
}

void AttachListener::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        spdlog::warn("attach socket accept: {}", std::strerror(errno));
      if (errno == EINTR) continue;
      return;
    }
    add_to_epoll(epoll_fd_.get(), fd);
    connections_.emplace(fd, Connection{net::Fd(fd), std::nullopt});
  }
}

void AttachListener::on_readable(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& conn = it->second;
  if (!conn.session_id) {
    handshake(conn);
    return;
  }
  // After the handshake: requests that carry file descriptors, one frame each; EOF (or a frame
  // that cannot be read) ends the session.
  const uint64_t id = *conn.session_id;
  auto frame = net::recv_frame(fd, kHandshakeTimeout, kMaxSessionRequestFds);
  if (!frame) {
    if (!net::peer_closed(fd))
      spdlog::warn("session {}: unreadable frame on the attach socket; ending the session", id);
    loop_.post([this, id] { runtime_.end_session(id, true); });
    close_connection(fd);
    return;
  }
  if (!net::send_frame(fd, handle_session_request(id, *frame).SerializeAsString())) {
    loop_.post([this, id] { runtime_.end_session(id, true); });
    close_connection(fd);
  }
}

v1::SessionResponse AttachListener::handle_session_request(uint64_t session_id,
                                                           const net::Frame& frame) {
  v1::SessionResponse response;
  v1::SessionRequest request;
  if (!request.ParseFromString(frame.payload) || !request.has_register_vmm()) {
    response.set_error_code(static_cast<uint32_t>(ErrorCode::kInvalidArgument));
    response.set_error_message("malformed request on the attach socket");
    return response;
  }
  try {
    const DeviceBufferExport exported = vmm_export(request.register_vmm(), frame.fds);
    *response.mutable_registered() =
        to_wire(loop_.call([&] { return runtime_.register_device_buffer(session_id, exported); }));
  } catch (const Error& e) {
    response.set_error_code(static_cast<uint32_t>(e.code()));
    response.set_error_message(e.message());
  } catch (const std::exception& e) {
    response.set_error_code(static_cast<uint32_t>(ErrorCode::kInternal));
    response.set_error_message(e.what());
  }
  return response;
}

void AttachListener::handshake(Connection& conn) {
  const int fd = conn.fd.get();
  auto frame = net::recv_frame(fd, kHandshakeTimeout, 0);
  v1::AttachRequest request;
  if (!frame || !request.ParseFromString(frame->payload)) {
    if (frame) send_error(fd, ErrorCode::kInvalidArgument, "malformed attach request");
    close_connection(fd);
    return;
  }
  net::PeerCredentials peer{};
  try {
    require_protocol(std::to_string(request.protocol_version()));
    peer = net::peer_credentials(fd);
    const AttachResult attached =
        loop_.call([&] { return runtime_.attach(peer, request.client_name(), fd); });
    v1::AttachResponse response;
    response.set_session_id(attached.session_id);
    response.set_token(attached.token);
    response.set_segment_name(attached.segment_name);
    response.set_ring_depth(attached.ring_depth);
    response.set_protocol_version(kProtocolVersion);
    response.set_daemon_version(std::string(release_version()));
    response.set_engine(runtime_.engine_description().name);
    conn.session_id = attached.session_id;
    if (!net::send_frame(fd, response.SerializeAsString(), {attached.wake_fd})) {
      spdlog::warn("session {}: client went away during attach", attached.session_id);
      loop_.post([this, id = attached.session_id] { runtime_.end_session(id, true); });
      close_connection(fd);
    }
  } catch (const Error& e) {
    spdlog::warn("attach from pid {} uid {} refused: {}", peer.pid, peer.uid, e.what());
    send_error(fd, e.code(), e.message());
    close_connection(fd);
  } catch (const std::exception& e) {
    send_error(fd, ErrorCode::kInternal, e.what());
    close_connection(fd);
  }
}

void AttachListener::close_connection(int fd) {
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(fd);
}

}  // namespace iris::daemon
