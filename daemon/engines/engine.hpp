// The copy-engine interface, one implementation per backend (NCCL's transports style).
//
// An engine moves bytes between memory the daemon has mapped or imported, asynchronously, and
// reports each copy's completion through poll(). Its completion_fd() (an eventfd) becomes
// readable when completions wait while the progress loop sleeps, so that the loop can sleep in
// epoll instead of spinning; the loop drains it, and poll() itself makes no system call when
// nothing finished.
//
// `cuda` runs copies on daemon-owned non-blocking streams, one per copy engine, and retires them
// through stream memory operations; `hsa` issues them on SDMA engines chosen per agent pair and
// completes them through pooled signals with a timeout. Each reports whether a transfer ran
// on a DMA copy engine or on compute units (TransferPath), which the stats show.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "iris/error.hpp"

namespace iris::daemon {

enum class TransferPath : uint8_t {
  kCopyEngine,    // a DMA engine moved the bytes
  kComputeUnits,  // host threads or GPU SMs/CUs moved the bytes
};

// Device index of host memory in CopyRequest and MappedBuffer.
inline constexpr int kHostMemory = -1;

// Which of its device's copy engines a copy may queue on. A GPU's copy engine runs what is queued
// on it first in, first out, so while tenants share a device an engine that keeps one of them for
// latency work (Engine::keeps_latency_engine) lets a small collective pass the bulk slices queued
// before it: CopyDispatcher marks latency copies kLatency and bulk ones kBulk then; kAny (a user
// alone) may use every engine. An engine that orders its own queue (Engine::serves_latency_first:
// the host engine's workers) runs kLatency copies before the others queued ahead of them.
enum class EngineQueue : uint8_t { kAny, kBulk, kLatency };

struct CopyRequest {
  const std::byte* src;
  std::byte* dst;
  uint64_t bytes;
  uint64_t cookie;  // returned untouched in the completion
  int src_device = kHostMemory;
  int dst_device = kHostMemory;
  // What keeps src and dst mapped. An engine that reports a copy failed before the hardware
  // let go of it (a timed-out DMA) holds these until it really ended, so that it never writes
  // into memory released or reused meanwhile. Filled only for such engines
  // (Engine::outlives_its_completions): until a copy completes its collective holds the buffers
  // anyway, and each owner copied costs a locked reference count twice per copy.
  std::shared_ptr<const void> src_owner = {};
  std::shared_ptr<const void> dst_owner = {};
  EngineQueue queue = EngineQueue::kAny;
};

// Whether a copy's source and destination are both in one GPU's memory.
inline bool within_one_gpu(const CopyRequest& copy) {
  return copy.src_device == copy.dst_device && copy.src_device != kHostMemory;
}

// A copy between host memory done on the caller's thread at once (Engine::copy_now): nothing
// to complete or keep alive, so none of CopyRequest's cookie, devices or owners.
struct HostCopy {
  const std::byte* src;
  std::byte* dst;
  uint64_t bytes;
};

struct CopyCompletion {
  uint64_t cookie;
  ErrorCode code;
  TransferPath path;
  uint64_t bytes;
  // How long the engine spent serving the copy, where it knows (a host worker's memcpy, a CUDA
  // stream's share of the time it was busy); 0: unknown, the dispatcher estimates it from the
  // spacing of completions, which credits concurrent engines' time to whichever copy ends next.
  uint64_t engine_ns = 0;
};

struct CopyEngineDescription {
  std::string name;
  uint32_t index;
};

// Where a device's engines copy to: a peer GPU or host memory, the link, and the engines the
// runtime offers for copies in that direction (hsa engine).
struct PeerLink {
  std::string bus_id;  // "host" for host memory
  std::string type;    // "xgmi", "pcie", ...
  std::vector<uint32_t> engines;
};

struct DeviceDescription {
  std::string name;
  std::string bus_id;
  uint64_t memory_bytes;
  std::vector<CopyEngineDescription> engines;
  std::vector<std::string> peer_bus_ids;  // GPUs it copies to and from directly
  std::vector<PeerLink> links;            // empty where the engine does not report them
};

struct EngineDescription {
  std::string name;    // "host", "cuda", "hsa"
  std::string reason;  // why this engine was chosen
  std::vector<DeviceDescription> devices;
  std::string driver_version;   // empty for the host engine
  std::string copy_method;      // how copies are issued, e.g. the runtime call and engine choice
  std::string runtime_library;  // the GPU runtime files loaded (empty for the host engine)
};

// The GPU runtime that exported a device buffer.
enum class DeviceApi : uint8_t { kCuda, kHip };

// GPU memory a client exported for irisd: a legacy IPC handle (RegisterBuffer's cuda_ipc), or
// VMM allocations as file descriptors (RegisterVmmBuffer over the attach socket).
struct DeviceBufferExport {
  DeviceApi api = DeviceApi::kCuda;
  std::string ipc_handle;  // the exporting runtime's IPC handle bytes; empty for VMM
  std::string bus_id;      // PCI bus id of the device, as the client sees it
  uint64_t offset;         // start of the registered range inside the (first) allocation
  uint64_t bytes;
  std::vector<int> vmm_fds;               // VMM: one per physical allocation, borrowed
  std::vector<uint64_t> vmm_chunk_bytes;  // VMM: their sizes, in address order
  uint32_t runtime_version = 0;           // the exporter's runtime; 0 when it did not say
};

// Throws iris::Error kOutOfRange unless the export's range lies inside `size` bytes of `what`.
void check_export_range(const DeviceBufferExport& exported, uint64_t size, const char* what);

// Checks a VMM export: one file descriptor per allocation, sizes neither zero nor overflowing,
// the range inside them. Returns the allocations' total size. Throws iris::Error.
uint64_t check_vmm_export(const DeviceBufferExport& exported);

struct ImportedMemory {
  std::byte* base;  // the registered range, mapped in irisd
  uint64_t bytes;
  int device;                       // the engine's device index
  std::shared_ptr<void> keepalive;  // the import; closed when the last user drops it
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const EngineDescription& description() const = 0;
  // Starts the copies; the source and destination must stay mapped until each completes.
  virtual void submit(std::span<const CopyRequest> copies) = 0;
  // Waits until no copy touches the memory it was given (those running end; the host engine drops
  // those still queued, the GPU engines let them finish), so that the buffers may be unmapped:
  // irisd stops its engine before it frees its sessions. No copy may be submitted after it.
  // Completions are not reported: irisd is stopping and its clients run the copies again.
  virtual void stop() = 0;
  // Appends finished copies to `out` without blocking; returns how many were appended.
  virtual std::size_t poll(std::vector<CopyCompletion>& out) = 0;
  // An eventfd written when completions wait while the progress loop sleeps; the caller drains
  // it.
  virtual int completion_fd() const = 0;
  // Before the progress loop sleeps: announce completions on completion_fd() from now on; false
  // when one is already waiting (the loop then polls instead). An engine may skip the fd while
  // the loop is awake, since it polls anyway: a system call per copy saved under load.
  virtual bool arm_completion_wakeup() { return true; }
  // The loop is awake again.
  virtual void disarm_completion_wakeup() {}
  // True while copies are in flight whose completion no fd will signal: the progress loop then
  // keeps polling instead of sleeping.
  virtual bool needs_polling() const { return false; }
  // Whether a copy may still touch its memory after the engine reported it (then CopyRequest's
  // owners must be filled).
  virtual bool outlives_its_completions() const { return false; }
  // Whether copies of `device` (the engine's index) marked EngineQueue::kLatency run on a copy
  // engine that kBulk copies never queue on.
  virtual bool keeps_latency_engine(int device) const { return false; }
  // Whether a copy marked EngineQueue::kLatency runs before the copies not so marked that were
  // queued ahead of it (the host engine's workers take its chunks first): then only the chunks
  // being copied stand in its way, however much bulk is queued, and CopyDispatcher gives latency
  // work a bound of its own while bulk keeps the whole bound.
  virtual bool serves_latency_first() const { return false; }
  // How many times the device's bound and slices CopyDispatcher gives `copy`'s path while tenants
  // share the device (1: the bound as configured). The bound is meant as a bounded time of the
  // engines' work, sized for a copy engine on PCIe; a path many times faster (a GPU copying within
  // its own memory) gets a lane of its own with a bound as many times larger, or it would spend
  // more time waiting for irisd to hand over its next slice than copying.
  virtual uint32_t pace_scale(const CopyRequest& copy) const { return 1; }
  // Copies between host memory are cheaper to do on the calling thread at once than to hand over
  // (a memcpy of a small block costs less than waking a host-engine worker, or a copy engine's
  // round trip, and retiring the completion later), up to a budget per submission
  // (`--inline-bytes`, every engine). How many bytes of a submission of `total` bytes its caller
  // copies at once: all of them while they fit the budget. Beyond it the rest goes to the engine,
  // and the caller keeps no more than an equal share beside the engine's copy_now_helpers
  // threads: it copies while they wake, but does not finish last (with the whole budget copied
  // here, 8 ranks of 64 KiB blocks waited for the progress thread: `scripts/bench.sh`,
  // docs/PERFORMANCE-HISTORY.md, "an arrival's copies at once").
  uint64_t copy_now_share(uint64_t total) const;
  // Copies `copies`, each between host memory, before returning; no completion comes for them.
  // Callers keep each submission's within copy_now_share().
  void copy_now(std::span<const HostCopy> copies);

  // Host memory the engine will copy from or to: pinned if the engine needs it (DMA); the
  // returned handle unpins it when the last copy is dropped. The host engine needs nothing.
  virtual std::shared_ptr<void> prepare_host_memory(void* base, uint64_t bytes) { return nullptr; }
  // Imports GPU memory another process exported. Throws iris::Error when it cannot.
  virtual ImportedMemory import_device_memory(const DeviceBufferExport& exported);
  // Stores `value` into a 32-bit word of imported GPU memory, in order with nothing else (a
  // stream memory operation on a signalling stream of that device). Throws iris::Error
  // kEngineError when the write could not be issued: the caller's stream would wait for it.
  virtual void write_device_word(int device, std::byte* address, uint32_t value);

 protected:
  // `copy_now_helpers`: the threads or queues that run what the engine is handed at once (the
  // host engine's workers).
  explicit Engine(uint64_t copy_now_budget, uint32_t copy_now_helpers = 1)
      : copy_now_budget_(copy_now_budget), copy_now_helpers_(copy_now_helpers) {}

 private:
  uint64_t copy_now_budget_;
  uint32_t copy_now_helpers_;
};

struct EngineOptions {
  std::string kind = "auto";  // auto | hsa | cuda | host
  uint32_t workers = 2;       // host engine: worker threads, each one "engine"
  // Every engine: a submission's copies between host memory run on the caller (copy_now) while
  // their total stays this small.
  uint64_t inline_bytes = 256 * 1024;
  uint64_t chunk_bytes = 1 << 20;  // host engine: large copies split into chunks this big
  // cuda engine: a copy at least this large is split into one piece per copy engine of its
  // device, so that one big block keeps every engine busy; 0 never splits.
  uint64_t split_bytes = 0;
  // hsa engine: a copy not complete after this long plus 1 ms per MiB fails with kEngineError
  // (a lost completion signal must not hang the collective).
  uint32_t copy_timeout_ms = 10000;
  // hsa engine: KFD's topology in sysfs, for the SDMA engines recommended per xGMI link.
  std::string kfd_topology = "/sys/class/kfd/kfd/topology";
};

// Builds the engine `options.kind` names; `auto` picks the best available and says why.
// Throws std::runtime_error naming the problem when the engine cannot start.
std::unique_ptr<Engine> make_engine(const EngineOptions& options);

}  // namespace iris::daemon
