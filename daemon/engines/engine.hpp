// The copy-engine interface, one implementation per backend (NCCL's transports style).
//
// An engine moves bytes between memory the daemon has mapped or imported, asynchronously, and
// reports each copy's completion through poll(). Its completion_fd() becomes readable when
// completions wait, so that the progress loop can sleep in epoll instead of spinning.
//
// The shape anticipates the GPU backends: `cuda` will run copies on daemon-owned non-blocking
// streams (one per device pair and engine) and complete them through stream memory operations
// or events; `hsa` will issue them on SDMA queues chosen per agent pair and complete them
// through pooled signals with a timeout. Both report whether a transfer ran on a DMA copy engine
// or on compute units (TransferPath), which the stats show.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "iris/error_code.hpp"

namespace iris::daemon {

enum class TransferPath : uint8_t {
  kCopyEngine,    // a DMA engine moved the bytes
  kComputeUnits,  // host threads or GPU SMs/CUs moved the bytes
};

struct CopyRequest {
  const std::byte* src;
  std::byte* dst;
  uint64_t bytes;
  uint64_t cookie;  // returned untouched in the completion
};

struct CopyCompletion {
  uint64_t cookie;
  ErrorCode code;
  TransferPath path;
  uint64_t bytes;
};

struct CopyEngineDescription {
  std::string name;
  uint32_t index;
};

struct DeviceDescription {
  std::string name;
  std::string bus_id;
  uint64_t memory_bytes;
  std::vector<CopyEngineDescription> engines;
};

struct EngineDescription {
  std::string name;    // "host", "cuda", "hsa"
  std::string reason;  // why this engine was chosen
  std::vector<DeviceDescription> devices;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const EngineDescription& description() const = 0;
  // Starts the copies; the source and destination must stay mapped until each completes.
  virtual void submit(std::span<const CopyRequest> copies) = 0;
  // Appends finished copies to `out` without blocking; returns how many were appended.
  virtual std::size_t poll(std::vector<CopyCompletion>& out) = 0;
  // Readable while completions wait; the engine clears it in poll().
  virtual int completion_fd() const = 0;
};

struct EngineOptions {
  std::string kind = "auto";          // auto | host
  uint32_t workers = 2;               // host engine: worker threads, each one "engine"
  uint64_t inline_bytes = 64 * 1024;  // host engine: copies this small run on the caller
  uint64_t chunk_bytes = 1 << 20;     // host engine: large copies split into chunks this big
};

// Builds the engine `options.kind` names; `auto` picks the best available and says why.
// Throws std::runtime_error naming the problem when the engine cannot start.
std::unique_ptr<Engine> make_engine(const EngineOptions& options);

}  // namespace iris::daemon
