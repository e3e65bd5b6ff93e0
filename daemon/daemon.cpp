#include "daemon/daemon.hpp"

#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
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

#include <condition_variable>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>

#include "daemon/front/attach_listener.hpp"
#include "daemon/front/control_service.hpp"
#include "daemon/front/meeting_point.hpp"
#include "daemon/operations/health.hpp"
#include "daemon/operations/metrics_server.hpp"
#include "daemon/operations/prometheus_collector.hpp"
#include "daemon/operations/systemd_notifier.hpp"
#include "daemon/runtime.hpp"
#include "daemon/tcp_listen.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

namespace {

std::string os_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// The STATUS= line `systemctl status` shows: engine, sessions, communicators, collectives/s.
class StatusLine {
 public:
  StatusLine(const Stats& stats, std::string engine) : stats_(stats), engine_(std::move(engine)) {}
  std::string next() {
    const auto now = std::chrono::steady_clock::now();
    uint64_t ended = 0;
    for (const auto& op : stats_.collectives)
      for (const auto& n : op) ended += n.load(std::memory_order_relaxed);
    const double seconds = std::chrono::duration<double>(now - last_).count();
    const double rate = seconds > 0 ? static_cast<double>(ended - last_ended_) / seconds : 0.0;
    last_ = now;
    last_ended_ = ended;
    return fmt::format("engine {}, {} sessions, {} communicators, {:.0f} collectives/s", engine_,
                       stats_.sessions.load(std::memory_order_relaxed),
                       stats_.communicators.load(std::memory_order_relaxed), rate);
  }

 private:
  const Stats& stats_;
  std::string engine_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  uint64_t last_ended_ = 0;
};

}  // namespace

struct Daemon::Parts {
  net::Fd lock_fd;
  Stats stats;
  Health health{stats};
  SystemdNotifier systemd;
  std::unique_ptr<StatusLine> status_line;
  std::shared_ptr<PrometheusCollector> collector;
  std::unique_ptr<MetricsServer> metrics;
  std::unique_ptr<MeetingPoint> meeting;
  std::string metrics_address;  // bound: HOST:PORT
  std::thread health_watch;
  std::mutex health_mutex;
  std::condition_variable health_stop_cv;
  bool health_stop = false;
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

  if (!config_.meeting_address.empty()) {
    p.meeting = std::make_unique<MeetingPoint>(
        config_.meeting_address, std::chrono::milliseconds(config_.limits.handshake_timeout_ms));
    config_.meeting_address = p.meeting->address();  // the bound port, for clients and status
    spdlog::info("meeting point: {}", config_.meeting_address);
  }
  p.engine = make_engine(config_.engine);
  spdlog::info("engine: {} ({})", p.engine->description().name, p.engine->description().reason);
  p.loop = std::make_unique<ProgressLoop>(std::chrono::microseconds(config_.spin_us));
  p.runtime = std::make_unique<Runtime>(config_, *p.engine, p.stats, *p.loop);
  p.status_line = std::make_unique<StatusLine>(p.stats, p.engine->description().name);
  // The beat runs on the loop thread: systemd's watchdog and the health check see the data
  // path turning, not merely the process alive.
  p.loop->set_heartbeat(std::min(p.systemd.period(), std::chrono::milliseconds(250)),
                        [&p, last_notify = std::chrono::steady_clock::now()]() mutable {
                          const auto now = std::chrono::steady_clock::now();
                          p.health.loop_turned(now);
                          if (!p.systemd.active() || now - last_notify < p.systemd.period()) return;
                          last_notify = now;
                          p.systemd.beat(p.status_line->next());
                        });
  p.loop->start();
  start_metrics();

  p.service = std::make_unique<ControlService>(config_, *p.runtime, *p.loop, p.stats, p.tokens,
                                               p.health, p.metrics_address);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + config_.socket_path, grpc::InsecureServerCredentials());
  limit_operator_connections(builder);
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
  start_health_watch();
  spdlog::info("irisd {} ready: control unix:{}, attach {}, ring depth {}, pid {}",
               release_version(), config_.socket_path, config_.attach_socket_path(),
               config_.limits.ring_depth, ::getpid());
  p.systemd.ready(p.status_line->next());
}

void Daemon::limit_operator_connections(grpc::ServerBuilder& builder) {
  // Whoever may open the socket may hold its connections: a connection that never completes
  // its HTTP/2 handshake ends at the attach socket's deadline (gRPC's default is 120 s), one
  // with no call for a minute ends too, and each carries a few small calls at a time. The
  // calls run on at most kOperatorThreads threads (more at once get RESOURCE_EXHAUSTED), so a
  // burst of iris-ctl calls cannot grow irisd by a thread stack and an arena each.
  constexpr int kOperatorThreads = 16;
  constexpr int kStreamsPerConnection = 8;
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(config_.limits.handshake_timeout_ms));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 60'000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kStreamsPerConnection);
  builder.SetMaxReceiveMessageSize(64 << 10);  // operator requests are a few bytes
  grpc::ResourceQuota quota("irisd-operators");
  quota.SetMaxThreads(kOperatorThreads);
  quota.Resize(64 << 20);
  builder.SetResourceQuota(quota);
}

void Daemon::start_metrics() {
  Parts& p = *parts_;
  if (config_.metrics_address.empty()) return;
  p.collector = std::make_shared<PrometheusCollector>(p.stats, p.engine->description(), p.health);
  try {
    // The data path never waits on this thread; a slow scraper costs it a descriptor.
    p.metrics = std::make_unique<MetricsServer>(config_.metrics_address, [&p] {
      return prometheus::TextSerializer().Serialize(p.collector->Collect());
    });
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(e.what()) + " (is the port taken? set metrics-address)");
  }
  p.metrics_address = with_port(config_.metrics_address, p.metrics->port());
  spdlog::info("metrics: http://{}/metrics", p.metrics_address);
}

void Daemon::start_health_watch() {
  Parts& p = *parts_;
  grpc::HealthCheckServiceInterface* service = p.server->GetHealthCheckService();
  p.health_watch = std::thread([&p, service] {
    bool was_healthy = true;
    uint64_t beats = 0;
    std::unique_lock lock(p.health_mutex);
    do {
      const Health::Verdict v = p.health.verdict(Health::Clock::now());
      // gRPC's health service starts SERVING: only a change is news to it.
      if (v.healthy != was_healthy) {
        if (service != nullptr) service->SetServingStatus(v.healthy);
        if (v.healthy) {
          spdlog::info("healthy again");
        } else {
          spdlog::error("unhealthy: {}", v.reason);
        }
        was_healthy = v.healthy;
      }
      // Memory freed by bursts of operator calls (their threads' arenas) goes back to the
      // system instead of staying in irisd's RSS.
      if (++beats % 10 == 0) ::malloc_trim(0);
    } while (
        !p.health_stop_cv.wait_for(lock, std::chrono::seconds(1), [&p] { return p.health_stop; }));
  });
}

void Daemon::shutdown() {
  Parts& p = *parts_;
  if (p.lock_fd) p.systemd.stopping();
  if (p.health_watch.joinable()) {
    {
      std::lock_guard lock(p.health_mutex);
      p.health_stop = true;
    }
    p.health_stop_cv.notify_all();
    p.health_watch.join();
  }
  p.metrics.reset();
  p.meeting.reset();
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
  // No copy may outlive the mappings it writes: the engine stops before the sessions (and their
  // buffers) go with the runtime.
  if (p.engine) p.engine->stop();
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
