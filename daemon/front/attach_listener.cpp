#include "daemon/front/attach_listener.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "daemon/front/session_calls.hpp"
#include "daemon/front/wire.hpp"
#include "daemon/operations/printable.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

namespace {
// What irisd keeps of a client's self-chosen name (escaped): enough to tell jobs apart.
constexpr std::size_t kMaxClientNameBytes = 128;

std::size_t quarter_of_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 4096;
  return std::max<std::size_t>(16, static_cast<std::size_t>(limit.rlim_cur / 4));
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
      attach_rate_(config.limits.max_attaches_per_uid_per_s),
      acceptor_(
          "attach socket",
          net::listen_unix(config.attach_socket_path(), config.socket_mode, config.socket_group),
          {quarter_of_descriptor_limit(), std::numeric_limits<std::size_t>::max(),
           "raise LimitNOFILE or max-sessions"},
          *this) {}

AttachListener::~AttachListener() {
  stop();
  ::unlink(config_.attach_socket_path().c_str());
}

void AttachListener::start() { acceptor_.start(); }

void AttachListener::stop() { acceptor_.stop(); }

bool AttachListener::on_accept(net::Fd& fd) {
  Connection conn;
  try {
    conn.peer = net::peer_credentials(fd.get());
  } catch (const std::exception& e) {
    spdlog::warn("attach socket: a connection without credentials, refused: {}", e.what());
    return false;
  }
  const int raw = fd.get();
  conn.fd = std::move(fd);
  acceptor_.set_deadline(
      raw, Clock::now() + std::chrono::milliseconds(config_.limits.handshake_timeout_ms), true);
  connections_.emplace(raw, std::move(conn));
  return true;
}

void AttachListener::on_close(int fd, SocketAcceptor::CloseReason why) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  if (why == SocketAcceptor::CloseReason::kEvicted)
    runtime_.tenant_log().warn(it->second.peer.uid, TenantLogKind::kConnection,
                               "attach connection of pid {} uid {}: closed before its handshake "
                               "to make room for new attaches ({} closed so far)",
                               it->second.peer.pid, it->second.peer.uid, ++handshakes_evicted_);
  if (auto id = it->second.session_id)
    loop_.post([this, id = *id] { runtime_.end_session(id, true); });
  if (!it->second.token.empty()) tokens_.revoke(it->second.token);
  connections_.erase(it);
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
    acceptor_.close(fd);
  } else if (status == net::FrameReader::Status::kClosed) {
    acceptor_.close(fd);
  }
}

bool AttachListener::on_frame(Connection& conn, net::Frame& frame) {
  const bool keep = conn.attached ? serve(conn, frame) : handshake(conn, frame);
  if (!keep) acceptor_.close(conn.fd.get());
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
    acceptor_.clear_deadline(fd);
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

}  // namespace iris::daemon
