// A process's connection to irisd: the attach handshake and the session's calls on the attach
// socket (the daemon learns our pid and uid from the kernel), and the session's shared-memory
// ring and completion slots. libiris does not speak the operators' gRPC service.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "iris/buffer.hpp"
#include "iris/request.hpp"

namespace iris {

// irisd's socket when ClientOptions says none: $IRIS_SOCKET, else /run/irisd/irisd.sock.
std::string default_socket_path();

struct ClientOptions {
  std::string socket_path = default_socket_path();
  std::string client_name;  // shown by `iris-ctl sessions`
  // How long a submission may wait for a free ring slot before throwing kBusy.
  std::chrono::nanoseconds submit_timeout = std::chrono::nanoseconds::max();
  // With irisd's cuda engine, GPU memory a collective names that no Buffer covers is registered
  // on first use, once per allocation, and kept while that allocation lives: at most this many
  // registrations (least recently used go first; 0 turns first-use registration off).
  std::size_t gpu_registration_cache = 1024;
  // When irisd dies, stops or restarts (an upgrade), the session attaches again to the same
  // socket and resumes: its buffers, communicators, captured graphs and unfinished collectives
  // come through, each collective completing exactly once. For this long calls wait (test()
  // reports not done); past it they fail with kDaemonGone. Unset: $IRIS_RESUME_WINDOW_MS, else
  // irisd's default (--resume-window-ms); 0 fails at once.
  std::optional<std::chrono::milliseconds> resume_window;
  // How long wait() polls a request's completion before it sleeps on a futex (waking a sleeper
  // costs tens of microseconds). Longer suits ranks with idle cores whose collectives are small
  // and frequent; shorter frees the core sooner. Unset: $IRIS_WAIT_SPIN_US, else 50 us.
  std::optional<std::chrono::microseconds> wait_spin;
};

// A Client belongs to the process that attached: after fork(), the child gets kInvalidArgument
// from it (attach again there) while the parent's session goes on. Every method of an empty
// (default-constructed or moved-from) Client throws kInvalidArgument.
class Client {
 public:
  struct Impl;
  // Attaches to irisd. Throws iris::Error: kUnavailable (not running, or the socket refused
  // us), kProtocolMismatch, kLimitExceeded.
  static Client connect(const ClientOptions& options = {});

  Client();
  ~Client();
  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;

  // Allocates host memory shared with irisd and registers it. With the cuda and hsa engines
  // irisd pins it, so copies to and from GPUs run on copy engines.
  Buffer allocate(std::size_t bytes);
  // Registers GPU memory of this process: any range of a cudaMalloc (cuMemAlloc) allocation,
  // imported by irisd once over CUDA IPC, or of VMM memory (cuMemCreate + cuMemMap, PyTorch's
  // expandable segments), whose allocations irisd imports from POSIX file descriptors sent over
  // the attach socket. The memory stays the caller's: it must outlive the returned Buffer.
  // Throws kUnavailable without a CUDA driver, kInvalidArgument for memory that cannot be
  // exported (VMM memory created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR).
  Buffer register_cuda_buffer(void* device_ptr, std::size_t bytes);
  // The same for AMD GPUs (hsa engine): any range of a hipMalloc allocation, imported by irisd
  // once over HIP IPC. Throws kUnavailable without a HIP runtime.
  Buffer register_hip_buffer(void* device_ptr, std::size_t bytes);
  // Shares existing host memory of this process with irisd, so that data need not be copied
  // into a buffer from allocate(): the pages of [ptr, ptr + bytes) are moved, in place, onto
  // memory irisd can reach (their contents copied once, now; the addresses stay the same).
  // `ptr` must be page-aligned and the range inside private, writable, anonymous memory (from
  // mmap, posix_memalign or aligned_alloc with page alignment); `bytes` is rounded up to whole
  // pages. Cost: one copy of the range at registration, none afterwards. The pages stay shared
  // memory after the Buffer goes (irisd no longer sees them). Throws kInvalidArgument naming
  // what does not fit.
  Buffer register_host(void* ptr, std::size_t bytes);
  // Registers with this client's session the host memory of a Buffer another Client of this
  // process made (allocate() or register_host()): the same memory at the same address, no copy,
  // so that collectives of both clients may name it (several ranks of one communicator in one
  // process need a Client each). The memory lives while either Buffer does. Throws
  // kInvalidArgument for GPU memory (each client registers that itself) or a Buffer of this
  // client.
  Buffer share(const Buffer& other);
  // A no-op through the ring: measures submit-to-completion latency.
  Request nop();
  // Collectives captured into CUDA graphs are waited for by the graph itself, never from the
  // host: a replay that failed (a rank died or destroyed its graph: peer_lost; a rank that never
  // replays: timeout) still lets the graph go on, with the receive buffers not (all) written.
  // This throws that failure (the last replay of any captured collective of this client that
  // failed, also when its graph has been destroyed since; that one is reported once); call it
  // after synchronizing the stream a graph ran on.
  void check_graphs();
  // Registrations made on first use (ClientOptions::gpu_registration_cache): those held, and
  // those retiring (going once the requests naming them finish).
  struct GpuRegistrations {
    std::size_t held = 0;
    std::size_t retiring = 0;
  };
  GpuRegistrations gpu_registrations() const;
  // This node's irisd address for communicators across nodes (NodeSet::addresses): opaque
  // bytes, to be gathered from every node by the job. Throws kUnavailable when that irisd
  // cannot scale out (UCX could not start there).
  std::string node_address();
  // Where this node's irisd lets the ranks of a job across nodes meet (HOST:PORT, its
  // --meeting-address; meet_nodes()); empty when it has none.
  std::string meeting_point();
  // What a library over libiris (irisd's NCCL API) did per operation of its API since its last
  // report (iris::kApiOperationNames indexes `operation`): irisd adds it to iris-ctl stats and
  // /metrics as the library's word. Throws kInvalidArgument past the bounds of api_operations.hpp.
  struct ApiWork {
    uint32_t operation = 0;
    uint64_t calls = 0;
    uint64_t irisd_bytes = 0;      // written by irisd's engine
    uint64_t sm_kernel_bytes = 0;  // written by kernels on the GPU's SMs
    uint64_t host_bytes = 0;       // written by the host
    uint64_t fallback_bytes = 0;   // written by a fallback library (a real NCCL) beside irisd
  };
  void report_api_work(const std::vector<ApiWork>& work);
  // Ends the session (also done by the destructor).
  void detach();

  uint64_t session_id() const;
  uint32_t ring_depth() const;
  const std::string& engine() const;
  const std::string& daemon_version() const;

 private:
  friend class Communicator;
  std::shared_ptr<Impl> impl_;
};

}  // namespace iris
