// How long a restart of irisd holds a running job: irisd is SIGKILLed under `--ranks` ranks that
// each hold `--registrations` buffers (host buffers on the host engine; cudaMalloc'd GPU memory,
// one CUDA IPC import each, on the cuda engine) and loop on a small all-gather, then started
// again. Per restart it reports the engine start (exec to the attach socket accepting, as the
// test harness sees it) and the reattach (from then to the last rank's first collective completed
// after the restart: every session reattached, its buffers, communicator and unfinished
// collective back). A benchmark, not a test: it asserts nothing about time.
//   iris-bench-resume [--engine host|cuda] [--ranks 8] [--registrations 100] [--restarts 5]
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "iris/iris.hpp"
#include "iris/shared/cuda_library.hpp"
#include "tests/support/daemon_process.hpp"

namespace {

using clock_type = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for every process

struct Options {
  std::string engine = "host";
  uint32_t ranks = 8;
  uint32_t registrations = 100;
  uint32_t restarts = 5;
  uint64_t registration_bytes = 1 << 20;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
      .count();
}

// A rank: registers its buffers, says "ready", then all-gathers 64 bytes in a loop until its
// input closes, writing the time of the first completion after each stall (a restart) to `out`.
int rank_main(const Options& o, const std::string& socket, uint32_t rank, int in, int out) {
  iris::ClientOptions options;
  options.socket_path = socket;
  options.client_name = "resume-bench " + std::to_string(rank);
  auto client = iris::Client::connect(options);
  auto comm = iris::Communicator::init(client, "resume-bench", o.ranks, rank);
  std::vector<iris::Buffer> held;
  if (o.engine == "cuda") {
    std::string why;
    const iris::cuda::Driver* cu = iris::cuda::load_driver(why);
    CUdevice device;
    CUcontext context;
    if (cu == nullptr || cu->cuInit(0) != CUDA_SUCCESS ||
        cu->cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
        cu->cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS ||
        cu->cuCtxSetCurrent(context) != CUDA_SUCCESS) {
      std::fprintf(stderr, "rank %u: no CUDA: %s\n", rank, why.c_str());
      return 2;
    }
    for (uint32_t i = 0; i < o.registrations; ++i) {
      CUdeviceptr p = 0;
      if (cu->cuMemAlloc(&p, o.registration_bytes) != CUDA_SUCCESS) return 3;
      held.push_back(client.register_cuda_buffer(reinterpret_cast<void*>(p), o.registration_bytes));
    }
  } else {
    for (uint32_t i = 0; i < o.registrations; ++i)
      held.push_back(client.allocate(o.registration_bytes));
  }
  auto send = client.allocate(64), recv = client.allocate(64 * o.ranks);
  const char ready = 'r';
  if (::write(out, &ready, 1) != 1) return 4;
  auto stopping = [in] {
    pollfd stop{in, POLLIN, 0};
    return ::poll(&stop, 1, 0) != 0;  // the parent closed our input
  };
  for (;;) {
    if (stopping()) return 0;
    const auto start = clock_type::now();
    try {
      comm.all_gather(send.data(), recv.data(), 64).wait();
    } catch (const iris::Error&) {
      if (stopping()) return 0;  // a rank that stopped first left the communicator
      throw;
    }
    if (clock_type::now() - start > std::chrono::milliseconds(20)) {
      const int64_t at = now_ns();
      if (::write(out, &at, sizeof(at)) != sizeof(at)) return 4;
    }
  }
}

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"iris-bench-resume"};
  app.add_option("--engine", o.engine)->check(CLI::IsMember({"host", "cuda"}));
  app.add_option("--ranks", o.ranks)->check(CLI::Range(1u, 64u));
  app.add_option("--registrations", o.registrations)->check(CLI::Range(0u, 1000u));
  app.add_option("--restarts", o.restarts)->check(CLI::Range(1u, 100u));
  CLI11_PARSE(app, argc, argv);

  iris::testing::DaemonProcess daemon(
      {"--engine", o.engine, "--log-level", "warn", "--resume-window-ms", "60000"});
  struct Child {
    pid_t pid;
    int to;    // closed to stop it
    int from;  // "r", then completion times after stalls
  };
  std::vector<Child> children;
  for (uint32_t r = 0; r < o.ranks; ++r) {
    int down[2], up[2];
    // Close-on-exec: the irisd started later must not hold a rank's input open.
    if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0) return 1;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      for (const Child& earlier : children) {  // their input must close when the parent's does
        ::close(earlier.to);
        ::close(earlier.from);
      }
      try {
        _exit(rank_main(o, daemon.socket(), r, down[0], up[1]));
      } catch (const iris::Error& e) {
        std::fprintf(stderr, "rank %u: %s\n", r, e.what());
        _exit(10 + static_cast<int>(e.code()));
      }
    }
    ::close(down[0]);
    ::close(up[1]);
    children.push_back({pid, down[1], up[0]});
  }
  auto read_within = [](int fd, void* data, std::size_t n, std::chrono::seconds timeout) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count() * 1000)) <= 0) return false;
    return ::read(fd, data, n) == static_cast<ssize_t>(n);
  };
  for (const Child& c : children) {
    char ready = 0;
    if (!read_within(c.from, &ready, 1, std::chrono::seconds(120)) || ready != 'r') {
      std::fprintf(stderr, "a rank did not get ready\n");
      return 1;
    }
  }
  std::printf(
      "| engine | ranks | registrations each | restart | engine start (ms) | reattach (ms) | "
      "total (ms) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<double> totals;
  for (uint32_t k = 1; k <= o.restarts; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    daemon.kill();
    const int64_t started = now_ns();
    daemon.start();
    const int64_t ready = now_ns();
    int64_t last = 0;
    for (const Child& c : children) {
      int64_t at = 0;
      if (!read_within(c.from, &at, sizeof(at), std::chrono::seconds(60))) {
        std::fprintf(stderr, "a rank did not resume within 60 s; daemon log:\n%s\n",
                     daemon.log().c_str());
        return 1;
      }
      last = std::max(last, at);
    }
    totals.push_back(ms(last - started));
    std::printf("| %s | %u | %u | %u | %.1f | %.1f | %.1f |\n", o.engine.c_str(), o.ranks,
                o.registrations, k, ms(ready - started), ms(last - ready), ms(last - started));
  }
  std::sort(totals.begin(), totals.end());
  std::printf("\nmedian total %.1f ms over %zu restarts\n", totals[totals.size() / 2],
              totals.size());
  int failed = 0;
  for (const Child& c : children) ::close(c.to);  // all told before any leaves
  for (const Child& c : children) failed += iris::testing::wait_for(c.pid) != 0;
  return failed == 0 ? 0 : 1;
}
