// CUDA engine: copies on daemon-owned non-blocking streams, one per copy engine of each device
// (asyncEngineCount), issued with cuMemcpyAsync. Completion: after each submit's copies on a
// stream, cuStreamWriteValue32 stores the stream's batch number into pinned host memory, and
// poll() retires every batch up to the number it reads there; each completion carries the time
// its stream served it (from its issue or the stream's previous retirement, whichever is later,
// to the poll that saw it; batches retired together share that time by bytes), so engine time
// per tenant is the engines' own, not the spacing of completions. No host callback and no thread
// waits on the GPU (a host function per copy, in the first version, serialised the copies:
// docs/PERFORMANCE-HISTORY.md); while batches are in flight, needs_polling() keeps the progress
// loop polling.
//
// Splitting: a copy of at least EngineOptions::split_bytes is cut into one piece per copy engine
// of its device, each on its own stream; its completion is reported once the last piece retired.
//
// Classes (EngineQueue): a copy marked kLatency runs on the device's last stream, and one marked
// kBulk on the others (split over those), so that while tenants share a device a small collective
// does not queue behind bulk slices on the same stream; kAny uses every stream in turn. It does
// not keep it from waiting behind them: on an H100 CUDA ran one context's device-to-host copies
// in order whatever their streams (iris-gpu-copy-engine-probe), so there the dispatcher's bound on
// bytes in flight is what bounds the wait.
//
// Multi-GPU: peer access is enabled between every pair of GPUs that can reach each other, and a
// copy runs on a stream of its destination GPU (the destination's engines pull the bytes). An
// imported allocation is mapped into the context of its own GPU and of each peer, and a copy uses
// the addresses of the context it runs in: a copy between two allocations imported into their
// own GPUs' contexts is staged through the host even with peer access on, and runs over NVLink
// only with both imported into the issuing context (two H200s: docs/PERFORMANCE-HISTORY.md,
// "Peer copies: which context imports the memory").
//
// Path accounting (TransferPath): device-to-device copies within one GPU run on SMs under the
// measured driver (580, CUDA 13.0, on the H200), so they count as compute units; copies that
// involve host memory or two GPUs count as copy engine.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "daemon/engines/engine.hpp"
#include "daemon/engines/release_stack.hpp"
#include "daemon/engines/split_completions.hpp"
#include "iris/shared/cuda_library.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class CudaEngine final : public Engine {
 public:
  // nullptr with `why_not` set when no usable NVIDIA GPU and driver are present.
  static std::unique_ptr<CudaEngine> create(const EngineOptions& options, const std::string& reason,
                                            std::string& why_not);
  // The same over a given driver table (tests pass one whose calls fail on purpose).
  static std::unique_ptr<CudaEngine> create(const cuda::Driver& driver,
                                            const EngineOptions& options, const std::string& reason,
                                            std::string& why_not);
  ~CudaEngine() override;

  const EngineDescription& description() const override { return description_; }
  void submit(std::span<const CopyRequest> copies) override;
  void stop() override;
  std::size_t poll(std::vector<CopyCompletion>& out) override;
  int completion_fd() const override { return event_fd_.get(); }
  bool needs_polling() const override { return in_flight_ != 0; }
  bool keeps_latency_engine(int device) const override {
    return devices_.at(static_cast<std::size_t>(device)).streams.size() > 1;
  }
  // A copy within one GPU runs at the memory's speed (~1.5 TB/s on an H100, against 55 GB/s over
  // PCIe), and each slice costs it far more than over PCIe: on an H100, beside a tenant's 4 KiB-
  // 1 MiB all-gathers, a tenant's 256 MiB ones ran at 0.29-0.30 of alone in 8 MiB slices, 0.55 in
  // 16 MiB, 0.80-0.85 in 32 MiB (the default's 128 MiB in 64 MiB slices, halved beside latency
  // work) and 0.98-0.99 in 64 MiB, where the small all-gathers' p50 was up to 8x of alone against
  // 0.8-2.7x at 32 MiB; whole, they waited for the other's whole 1 GiB of copies (~700 us, 17-24x).
  static constexpr uint32_t kWithinGpuPaceScale = 32;
  uint32_t pace_scale(const CopyRequest& copy) const override {
    return within_one_gpu(copy) ? kWithinGpuPaceScale : 1;
  }
  std::shared_ptr<void> prepare_host_memory(void* base, uint64_t bytes) override;
  ImportedMemory import_device_memory(const DeviceBufferExport& exported) override;
  void write_device_word(int device, std::byte* address, uint32_t value) override;

 private:
  // One copy, or one piece of a split copy (split != 0 names the whole copy in splits_).
  struct Piece {
    CopyCompletion completion;
    uint64_t split = 0;
  };
  struct Batch {
    uint32_t number;
    std::vector<Piece> pieces;
    std::chrono::steady_clock::time_point issued_at{};
  };
  struct Stream {
    CUstream handle = nullptr;
    std::atomic<uint32_t>* retired = nullptr;  // pinned host word the stream writes
    CUdeviceptr retired_device = 0;
    uint32_t issued = 0;
    std::deque<Batch> batches;
    // When poll() last saw a batch of it retire: a stream serves its batches one after the
    // other, so the next one's engine time starts there (or at its issue, if later).
    std::chrono::steady_clock::time_point last_retired_at{};
  };
  // The pieces of one submit that go to one stream (see submit()).
  struct Group {
    int device = 0;
    Stream* stream = nullptr;
    std::vector<CUdeviceptr> dsts, srcs;
    std::vector<size_t> sizes;
    Batch batch{};
  };
  struct Device {
    CUdevice handle;
    CUcontext context;
    std::string bus_id;
    std::vector<int> peers;       // devices it has peer access to
    std::vector<Stream> streams;  // one per copy engine
    CUstream signal = nullptr;    // stream-ordered done flags; never behind a copy
    uint32_t next_stream = 0;
  };

  CudaEngine(const cuda::Driver& driver, const EngineOptions& options, std::string reason);
  // An IPC import: the allocation mapped into its owner's context and its peers'.
  struct Import {
    std::vector<CUdeviceptr> base;  // per device context; 0 where not mapped
    size_t bytes;
    int owner;
  };
  // Enables peer access between every pair of devices that can reach each other.
  void connect_peers();
  void close_import(Import* import);
  // The engine's index of the GPU an export names. Throws kNotFound.
  int device_by_export(const DeviceBufferExport& exported) const;
  // VMM allocations (file descriptors) mapped back to back into one address range. Not cached:
  // each registration maps its own.
  ImportedMemory import_vmm(const DeviceBufferExport& exported, int device);
  // `address` (of memory on `owner`, as mapped in the owner's context) as seen by the context of
  // `device`, which runs the copy.
  CUdeviceptr address_on(int device, const std::byte* address, int owner) const;
  // Enqueues the copies on `stream`; false (after logging) when the driver refused them.
  bool issue(CUstream stream, int device, std::vector<CUdeviceptr>& dsts,
             std::vector<CUdeviceptr>& srcs, std::vector<size_t>& sizes);
  // Completes the batches of `st` that retired since the last look, each piece with its share
  // (by bytes) of the time the stream served them.
  void retire(Stream& st, std::vector<CopyCompletion>& out);
  // A non-blocking stream on `device`, destroyed (after it drained) by releases_.
  void create_stream(int device, CUstream& stream);
  // Makes a device's primary context current on the calling thread.
  void use_device(int index);
  // Throws iris::Error kEngineError naming `what` when `result` is not CUDA_SUCCESS.
  void check(CUresult result, const char* what) const;

  const cuda::Driver& cu_;
  EngineDescription description_;
  std::vector<Device> devices_;
  net::Fd event_fd_;           // immediate failures only
  std::vector<Piece> failed_;  // copies that could not be issued
  std::vector<Group> groups_;  // submit()'s, kept with their vectors' capacity
  // Piece vectors of retired batches, for the next batches: steady traffic allocates nothing.
  std::vector<std::vector<Piece>> spare_pieces_;
  uint64_t split_bytes_;
  SplitCompletions splits_;
  void* retired_words_ = nullptr;  // pinned page of the streams' retired counters
  uint64_t in_flight_ = 0;         // batches not yet retired
  bool use_batch_ = true;          // cleared if the driver refuses cuMemcpyBatchAsync
  std::map<std::string, std::weak_ptr<Import>> imports_;     // by IPC handle: one per allocation
  std::map<CUdeviceptr, std::weak_ptr<Import>> by_address_;  // by base in the owner's context
  // Contexts, pinned memory and streams the constructor took, released in reverse order: by
  // the destructor, or as soon as the constructor throws half way (--engine auto then falls
  // back with nothing held). Last member, so it runs first.
  ReleaseStack releases_;
};

}  // namespace iris::daemon
