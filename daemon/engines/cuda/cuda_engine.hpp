// CUDA engine: copies on daemon-owned non-blocking streams, one per copy engine of each device
// (asyncEngineCount), issued with cuMemcpyAsync. Completion: after each submit's copies on a
// stream, cuStreamWriteValue32 stores the stream's batch number into pinned host memory, and
// poll() retires every batch up to the number it reads there. No host callback and no thread
// waits on the GPU (a host function per copy cost about 10 us each, serialised, in the first
// version: see docs/PERFORMANCE.md); while batches are in flight, needs_polling() keeps the
// progress loop polling.
//
// Path accounting (TransferPath): device-to-device copies within one GPU run on SMs under the
// measured driver (580, CUDA 13.0: see DESIGN.md), so they count as compute units; copies that
// involve host memory or two GPUs count as copy engine.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "daemon/engines/engine.hpp"
#include "iris/shared/cuda_driver.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class CudaEngine final : public Engine {
 public:
  // nullptr with `why_not` set when no usable NVIDIA GPU and driver are present.
  static std::unique_ptr<CudaEngine> create(const EngineOptions& options, const std::string& reason,
                                            std::string& why_not);
  ~CudaEngine() override;

  const EngineDescription& description() const override { return description_; }
  void submit(std::span<const CopyRequest> copies) override;
  std::size_t poll(std::vector<CopyCompletion>& out) override;
  int completion_fd() const override { return event_fd_.get(); }
  bool needs_polling() const override { return in_flight_ != 0; }
  std::shared_ptr<void> prepare_host_memory(void* base, uint64_t bytes) override;
  ImportedMemory import_device_memory(const DeviceBufferExport& exported) override;
  void write_device_word(int device, std::byte* address, uint32_t value) override;

 private:
  struct Batch {
    uint32_t number;
    std::vector<CopyCompletion> completions;
  };
  struct Stream {
    CUstream handle = nullptr;
    std::atomic<uint32_t>* retired = nullptr;  // pinned host word the stream writes
    CUdeviceptr retired_device = 0;
    uint32_t issued = 0;
    std::deque<Batch> batches;
  };
  struct Device {
    CUdevice handle;
    CUcontext context;
    std::string bus_id;
    std::vector<Stream> streams;  // one per copy engine
    CUstream signal = nullptr;    // stream-ordered done flags; never behind a copy
    uint32_t next_stream = 0;
  };

  CudaEngine(const cuda::Driver& driver, std::string reason);
  // Enqueues the copies on `stream`; false (after logging) when the driver refused them.
  bool issue(CUstream stream, int device, std::vector<CUdeviceptr>& dsts,
             std::vector<CUdeviceptr>& srcs, std::vector<size_t>& sizes);
  // Makes a device's primary context current on the calling thread.
  void use_device(int index);
  // Throws iris::Error kEngineError naming `what` when `result` is not CUDA_SUCCESS.
  void check(CUresult result, const char* what) const;

  const cuda::Driver& cu_;
  EngineDescription description_;
  std::vector<Device> devices_;
  net::Fd event_fd_;                    // immediate failures only
  std::vector<CopyCompletion> failed_;  // copies that could not be issued
  void* retired_words_ = nullptr;       // pinned page of the streams' retired counters
  uint64_t in_flight_ = 0;              // batches not yet retired
  bool use_batch_ = true;               // cleared if the driver refuses cuMemcpyBatchAsync
  std::map<std::string, std::weak_ptr<void>> imports_;  // by IPC handle: one open per allocation
};

}  // namespace iris::daemon
