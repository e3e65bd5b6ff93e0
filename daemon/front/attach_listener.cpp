#include "daemon/front/attach_listener.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/front/session_calls.hpp"
#include "daemon/front/wire.hpp"
#include "daemon/operations/printable.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

namespace {
// Accepting pauses this long when the process is out of descriptors; handshakes that time out
// meanwhile give some back.
constexpr auto kAcceptPause = std::chrono::milliseconds(200);
constexpr auto kAcceptWarningInterval = std::chrono::seconds(10);
// What irisd keeps of a client's self-chosen name (escaped): enough to tell jobs apart.
constexpr std::size_t kMaxClientNameBytes = 128;

std::size_t quarter_of_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<std::size_t>(16, static_cast<std::size_t>(limit.rlim_cur / 4));
}

void add_to_epoll(int epoll_fd, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw std::runtime_error(std::string("epoll_ctl: ") + std::strerror(errno));
}

v1::AttachResponse attach_error(ErrorCode code, const std::string& message) {
  v1::AttachResponse response;
  response.set_error_code(static_cast<uint32_t>(code));
  response.set_error_message(message);
  response.set_protocol_version(kProtocolVersion);
  response.set_daemon_version(std::string(release_version()));
  return response;
}
}  // namespace

AttachListener::AttachListener(const Config& config, Runtime& runtime, ProgressLoop& loop,
                               CallerTokens& tokens)
    : config_(config),
      runtime_(runtime),
      loop_(loop),
      tokens_(tokens),
      listen_fd_(
          net::listen_unix(config.attach_socket_path(), config.socket_mode, config.socket_group)),
      epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      stop_fd_(::eventfd(0, EFD_CLOEXEC)),
      max_handshakes_(quarter_of_descriptor_limit()),
      attach_rate_(config.limits.max_attaches_per_uid_per_s) {
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

int AttachListener::next_timeout_ms() const {
  std::optional<Clock::time_point> next = accept_paused_until_;
  if (!handshakes_.empty() && (!next || handshakes_.begin()->first < *next))
    next = handshakes_.begin()->first;
  if (!next) return -1;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

void AttachListener::run() {
  epoll_event events[64];
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, 64, next_timeout_ms());
    if (n < 0 && errno != EINTR) {
      spdlog::error("attach listener: epoll_wait: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_.get()) return;
      if (fd == listen_fd_.get()) {
        accept_all();
      } else {
        on_readable(fd);
      }
    }
    close_expired_handshakes();
    if (accept_paused_until_ && Clock::now() >= *accept_paused_until_) {
      accept_paused_until_.reset();
      add_to_epoll(epoll_fd_.get(), listen_fd_.get());
    }
  }
}

void AttachListener::pause_accepting(int error) {
  // Level-triggered epoll would report the pending connection again at once: take the listening
  // socket out for a while instead of spinning on accept().
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, listen_fd_.get(), nullptr);
  accept_paused_until_ = Clock::now() + kAcceptPause;
  ++accept_failures_since_warning_;
  if (Clock::now() - last_accept_warning_ >= kAcceptWarningInterval) {
    spdlog::warn(
        "attach socket: cannot accept ({}; {} sessions' connections hold the descriptors, {} "
        "failures in the last {} s): pausing accepts for {} ms; raise LimitNOFILE or "
        "max-sessions",
        std::strerror(error), connections_.size(), accept_failures_since_warning_,
        std::chrono::duration_cast<std::chrono::seconds>(kAcceptWarningInterval).count(),
        kAcceptPause.count());
    last_accept_warning_ = Clock::now();
    accept_failures_since_warning_ = 0;
  }
}

bool AttachListener::close_oldest_handshake() {
  if (handshakes_.empty()) return false;
  const auto oldest = connections_.find(handshakes_.begin()->second);
  if (oldest == connections_.end()) {  // cannot happen: every entry's connection is open
    handshakes_.erase(handshakes_.begin());
    return true;
  }
  runtime_.tenant_log().warn(oldest->second.peer.uid, TenantLogKind::kConnection,
                             "attach connection of pid {} uid {}: closed before its handshake to "
                             "make room for new attaches ({} closed so far)",
                             oldest->second.peer.pid, oldest->second.peer.uid,
                             ++handshakes_evicted_);
  close_connection(oldest->first);
  return true;
}

void AttachListener::accept_all() {
  for (;;) {
    if (handshakes_.size() >= max_handshakes_) close_oldest_handshake();
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        if (close_oldest_handshake()) continue;  // its descriptor is free now
        pause_accepting(errno);
      }
      return;
    }
    Connection conn;
    conn.fd = net::Fd(fd);
    try {
      conn.peer = net::peer_credentials(fd);
      add_to_epoll(epoll_fd_.get(), fd);
    } catch (const std::exception& e) {
      pause_accepting(errno);
      return;
    }
    conn.deadline = Clock::now() + std::chrono::milliseconds(config_.limits.handshake_timeout_ms);
    handshakes_.emplace(conn.deadline, fd);
    connections_.emplace(fd, std::move(conn));
  }
}

void AttachListener::close_expired_handshakes() {
  const auto now = Clock::now();
  while (!handshakes_.empty() && handshakes_.begin()->first <= now) {
    const int fd = handshakes_.begin()->second;
    handshakes_.erase(handshakes_.begin());
    close_connection(fd);
  }
}

void AttachListener::on_readable(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& conn = it->second;
  const auto status = conn.reader.read_some(fd);
  while (auto frame = conn.reader.next()) {
    if (!on_frame(conn, *frame)) return;  // closed
  }
  if (status == net::FrameReader::Status::kBad) {
    runtime_.tenant_log().warn(
        conn.peer.uid, TenantLogKind::kConnection,
        "attach connection of pid {} uid {} {}: oversized frame or too many descriptors; closing "
        "it",
        conn.peer.pid, conn.peer.uid,
        conn.session_id ? "(session " + std::to_string(*conn.session_id) + ")"
                        : std::string("(no session)"));
    close_connection(fd);
  } else if (status == net::FrameReader::Status::kClosed) {
    close_connection(fd);
  }
}

bool AttachListener::on_frame(Connection& conn, net::Frame& frame) {
  const bool keep = conn.attached ? serve(conn, frame) : handshake(conn, frame);
  if (!keep) close_connection(conn.fd.get());
  return keep;
}

bool AttachListener::handshake(Connection& conn, const net::Frame& frame) {
  const int fd = conn.fd.get();
  v1::AttachRequest request;
  if (!request.ParseFromString(frame.payload)) {
    net::send_frame(
        fd,
        attach_error(ErrorCode::kInvalidArgument, "malformed attach request").SerializeAsString());
    return false;
  }
  const net::PeerCredentials& peer = conn.peer;
  try {
    require_protocol(std::to_string(request.protocol_version()));
    if (!attach_rate_.take(peer.uid, Clock::now()))
      throw Error(ErrorCode::kBusy,
                  "uid " + std::to_string(peer.uid) + " attached more than " +
                      std::to_string(config_.limits.max_attaches_per_uid_per_s) +
                      " times in the last second (max_attaches_per_uid_per_s); try again in a "
                      "moment, or attach once and keep the session");
    v1::AttachResponse response;
    response.set_protocol_version(kProtocolVersion);
    response.set_daemon_version(std::string(release_version()));
    response.set_engine(runtime_.engine_description().name);
    response.set_resume_window_ms(config_.limits.resume_window_ms);
    std::vector<int> fds;
    AttachResult attached{};
    if (!request.operator_only()) {
      const std::string name = printable(request.client_name(), kMaxClientNameBytes);
      std::optional<Runtime::Resume> resume;
      if (request.has_resume()) {
        if (frame.fds.size() != 1)
          throw Error(ErrorCode::kInvalidArgument,
                      "resuming a session takes its segment beside the request, got " +
                          std::to_string(frame.fds.size()) + " descriptors");
        net::Fd segment(::fcntl(frame.fds[0].get(), F_DUPFD_CLOEXEC, 0));
        if (!segment)
          throw Error(ErrorCode::kLimitExceeded,
                      std::string("irisd is out of descriptors: ") + std::strerror(errno));
        resume = Runtime::Resume{std::move(segment), request.resume().previous_session_id(),
                                 request.resume().held_ms(), request.resume().next_buffer_id(),
                                 printable(request.resume().previous_daemon_version(), 64)};
        response.set_resumed(true);
      }
      attached = loop_.call([&] { return runtime_.attach(peer, name, fd, std::move(resume)); });
      conn.session_id = attached.session_id;
      response.set_session_id(attached.session_id);
      response.set_ring_depth(attached.ring_depth);
      fds = {attached.wake.get(), attached.segment.get()};
    }
    conn.token = tokens_.issue(
        {peer.uid, is_operator(peer.pid, peer.uid, peer.gid, config_.operator_group)});
    response.set_token(conn.token);
    conn.attached = true;
    handshakes_.erase({conn.deadline, fd});
    if (!net::send_frame(fd, response.SerializeAsString(), fds)) {
      const int error = errno;
      runtime_.tenant_log().warn(peer.uid, TenantLogKind::kConnection,
                                 "attach from pid {} uid {}: the answer could not be sent ({}); "
                                 "closing the connection",
                                 peer.pid, peer.uid, std::strerror(error));
      return false;
    }
    // Only now may anything the client writes to its ring end the session: it knows it attached.
    if (conn.session_id) loop_.post([this, id = *conn.session_id] { runtime_.start_serving(id); });
    return true;
  } catch (const Error& e) {
    runtime_.tenant_log().warn(peer.uid, TenantLogKind::kAttach,
                               "attach from pid {} uid {} refused: {}", peer.pid, peer.uid,
                               e.what());
    net::send_frame(fd, attach_error(e.code(), e.message()).SerializeAsString());
  } catch (const std::exception& e) {
    net::send_frame(fd, attach_error(ErrorCode::kInternal, e.what()).SerializeAsString());
  }
  return false;
}

bool AttachListener::serve(Connection& conn, net::Frame& frame) {
  SessionCallResult result;
  if (!conn.session_id) {
    result.response.set_error_code(static_cast<uint32_t>(ErrorCode::kInvalidArgument));
    result.response.set_error_message("this connection holds no session (an operator-only attach)");
  } else {
    result = loop_.call(
        [&] { return handle_session_call(runtime_, *conn.session_id, frame.payload, frame.fds); });
  }
  std::vector<int> fds;
  if (result.memfd) fds.push_back(result.memfd.get());
  // A client that does not read its answers fills the socket: the non-blocking send fails and
  // the connection ends, rather than this thread waiting for it.
  if (!net::send_frame(conn.fd.get(), result.response.SerializeAsString(), fds)) return false;
  if (result.detached) {
    conn.session_id.reset();  // ended already, not lost
    return false;
  }
  return true;
}

void AttachListener::close_connection(int fd) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (auto id = it->second.session_id)
    loop_.post([this, id = *id] { runtime_.end_session(id, true); });
  if (!it->second.token.empty()) tokens_.revoke(it->second.token);
  if (!it->second.attached) handshakes_.erase({it->second.deadline, fd});
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(it);
}

}  // namespace iris::daemon
