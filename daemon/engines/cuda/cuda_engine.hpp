// CUDA engine: copies on daemon-owned non-blocking streams, one per copy engine of each device
// (asyncEngineCount), issued with cuMemcpyAsync; each copy's completion comes back through a
// host function queued behind it on its stream, which pushes the completion and rings an
// eventfd, so the progress loop can sleep in epoll and no thread waits on the GPU.
//
// Path accounting (TransferPath): device-to-device copies within one GPU run on SMs under the
// measured driver (580, CUDA 13.0: see DESIGN.md), so they count as compute units; copies that
// involve host memory or two GPUs count as copy engine.
#pragma once

#include <map>
#include <mutex>
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
  std::shared_ptr<void> prepare_host_memory(void* base, uint64_t bytes) override;
  ImportedMemory import_device_memory(const DeviceBufferExport& exported) override;

 private:
  struct Device {
    CUdevice handle;
    CUcontext context;
    std::string bus_id;
    std::vector<CUstream> streams;  // one per copy engine
    uint32_t next_stream = 0;
  };
  struct PendingCopy {
    CudaEngine* engine;
    CopyCompletion completion;
  };

  CudaEngine(const cuda::Driver& driver, std::string reason);
  static void CUDA_CB on_copy_done(void* pending);
  void finish(const CopyCompletion& completion);
  // Makes a device's primary context current on the calling thread.
  void use_device(int index);
  // Throws iris::Error kEngineError naming `what` when `result` is not CUDA_SUCCESS.
  void check(CUresult result, const char* what) const;

  const cuda::Driver& cu_;
  EngineDescription description_;
  std::vector<Device> devices_;
  net::Fd event_fd_;
  std::mutex done_mutex_;  // host functions run on CUDA's callback thread
  std::vector<CopyCompletion> done_;
  std::map<std::string, std::weak_ptr<void>> imports_;  // by IPC handle: one open per allocation
};

}  // namespace iris::daemon
