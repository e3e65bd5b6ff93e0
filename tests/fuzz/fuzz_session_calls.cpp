// Fuzzes a session's calls as the attach listener hands them to the runtime: arbitrary
// SessionRequest bytes against a real Runtime on the host engine, one attached session (attached
// again whenever an input detaches it). Limits are small so that inputs cannot exhaust memory.
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include "daemon/engines/host/host_engine.hpp"
#include "daemon/front/session_calls.hpp"

using namespace iris;
using namespace iris::daemon;

namespace {
struct World {
  Config config;
  HostEngine engine{EngineOptions{}, "fuzz"};
  Stats stats;
  ProgressLoop loop{std::chrono::microseconds(0)};
  std::unique_ptr<Runtime> runtime;
  int connection[2] = {-1, -1};
  uint64_t session = 0;

  World() {
    config.socket_path = "/tmp/iris-fuzz-" + std::to_string(::getpid()) + ".sock";
    config.limits.max_buffer_bytes = 1 << 20;
    config.limits.max_buffers_per_session = 16;
    config.limits.max_buffer_bytes_per_uid = 4 << 20;
    // Session calls, not UCX: UCX's allocations for the process's lifetime read as leaks here.
    config.scale_out = false;
    runtime = std::make_unique<Runtime>(config, engine, stats, loop);
    ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, connection);
    attach();
  }
  void attach() {
    session =
        runtime->attach({::getpid(), ::getuid(), ::getgid()}, "fuzz", connection[0]).session_id;
    runtime->start_serving(session);
  }
};
World* world = nullptr;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);  // malformed strings are the point here
  spdlog::set_level(spdlog::level::off);
  world = new World();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string payload(reinterpret_cast<const char*>(data), size);
  SessionCallResult result = handle_session_call(*world->runtime, world->session, payload, {});
  if (result.detached || world->runtime->sessions().find(world->session) == nullptr)
    world->attach();
  return 0;
}
