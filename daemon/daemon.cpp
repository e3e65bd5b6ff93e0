#include "daemon/daemon.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "daemon/front/attach_listener.hpp"
#include "daemon/front/control_service.hpp"
#include "daemon/runtime.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

namespace {

std::string os_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// Tells systemd (Type=notify) that irisd is ready, without linking libsystemd.
void notify_systemd_ready() {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path)) return;
  std::memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  net::Fd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  static constexpr char kReady[] = "READY=1";
  ::sendto(fd.get(), kReady, sizeof(kReady) - 1, 0, reinterpret_cast<sockaddr*>(&addr),
           static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
}

}  // namespace

struct Daemon::Parts {
  net::Fd lock_fd;
  Stats stats;
  CallerTokens tokens;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ProgressLoop> loop;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<AttachListener> listener;
  std::unique_ptr<ControlService> service;
  std::unique_ptr<grpc::Server> server;
};

Daemon::Daemon(Config config) : config_(std::move(config)), parts_(std::make_unique<Parts>()) {}

Daemon::~Daemon() { shutdown(); }

void Daemon::start() {
  Parts& p = *parts_;
  if (config_.limits.max_open_files != 0) {
    const rlimit limit{config_.limits.max_open_files, config_.limits.max_open_files};
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0)
      throw std::runtime_error(os_error("cannot set the descriptor limit to " +
                                        std::to_string(config_.limits.max_open_files)));
  }
  const std::filesystem::path dir = std::filesystem::path(config_.socket_path).parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir)) std::filesystem::create_directories(dir);

  // One daemon per socket: the lock outlives a crash only as long as the process does.
  net::Fd lock(::open(config_.lock_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock) throw std::runtime_error(os_error("cannot open " + config_.lock_path()));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0)
    throw std::runtime_error("another irisd already serves " + config_.socket_path + " (lock " +
                             config_.lock_path() + " is held); stop it first");
  p.lock_fd = std::move(lock);  // from here on, the sockets and segments are ours to clean

  // Whatever a dead daemon left behind is stale now that we hold the lock.
  for (const std::string& path : {config_.socket_path, config_.attach_socket_path()})
    if (::unlink(path.c_str()) == 0) spdlog::info("removed stale socket {}", path);

  p.engine = make_engine(config_.engine);
  spdlog::info("engine: {} ({})", p.engine->description().name, p.engine->description().reason);
  p.loop = std::make_unique<ProgressLoop>(std::chrono::microseconds(config_.spin_us));
  p.runtime = std::make_unique<Runtime>(config_, *p.engine, p.stats, *p.loop);
  p.loop->start(*p.runtime);

  p.service = std::make_unique<ControlService>(config_, *p.runtime, *p.loop, p.stats, p.tokens);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + config_.socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(p.service.get());
  // gRPC creates the socket file: keep it private until its mode and group are set.
  const mode_t old_umask = ::umask(0177);
  p.server = builder.BuildAndStart();
  ::umask(old_umask);
  if (!p.server) throw std::runtime_error("cannot serve gRPC on unix:" + config_.socket_path);
  if (!config_.socket_group.empty()) {
    group* g = ::getgrnam(config_.socket_group.c_str());
    if (g == nullptr)
      throw std::runtime_error("socket group '" + config_.socket_group + "' does not exist");
    if (::chown(config_.socket_path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0)
      throw std::runtime_error(os_error("cannot set the group of " + config_.socket_path));
  }
  if (::chmod(config_.socket_path.c_str(), config_.socket_mode) != 0)
    throw std::runtime_error(os_error("cannot chmod " + config_.socket_path));

  p.listener = std::make_unique<AttachListener>(config_, *p.runtime, *p.loop, p.tokens);
  p.listener->start();
  spdlog::info("irisd {} ready: control unix:{}, attach {}, ring depth {}, pid {}",
               release_version(), config_.socket_path, config_.attach_socket_path(),
               config_.limits.ring_depth, ::getpid());
  notify_systemd_ready();
}

void Daemon::wait_for_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  spdlog::info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

void Daemon::shutdown() {
  Parts& p = *parts_;
  if (p.listener) p.listener->stop();
  if (p.runtime && p.loop) {
    try {
      p.loop->call([&] { p.runtime->mark_all_stopped(); });
    } catch (const Error&) {
    }
  }
  if (p.server) {
    spdlog::debug("stopping the gRPC server");
    // Idle client connections hold Shutdown until its deadline; calls still running get this long.
    p.server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  }
  spdlog::debug("stopping the progress loop");
  if (p.loop) p.loop->stop();
  p.server.reset();
  p.service.reset();
  p.listener.reset();
  p.runtime.reset();
  p.loop.reset();
  p.engine.reset();
  if (p.lock_fd) {
    ::unlink(config_.socket_path.c_str());
    // Unlinked while still held, so that a daemon starting now locks a new file, never this one.
    ::unlink(config_.lock_path().c_str());
    p.lock_fd = net::Fd();
  }
}

}  // namespace iris::daemon
