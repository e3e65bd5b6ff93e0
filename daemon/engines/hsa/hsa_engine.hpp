// HSA engine (AMD MI300-series): copies on the GPUs' SDMA engines through the ROCm runtime.
//
// Each submit is planned by SdmaPlanner (which engine of which agent runs each copy, from the
// engines hsa_amd_memory_copy_engine_status offers per pair, queried once at start-up while
// idle) and issued with hsa_amd_memory_async_copy_on_engine(force_copy_on_sdma) where the
// runtime has it (ROCm 5.6+), else with hsa_amd_memory_async_copy (the runtime picks the engine;
// `iris-ctl status` says so under copy_method). Every copy gets a completion signal from a pool;
// poll() reads the in-flight signals without blocking and fails a copy whose signal has not
// dropped to 0 by its deadline (copy_timeout_ms + 1 ms per MiB): lost completion signals are a
// known gfx942 fault, and they must cost one collective an error, not hang it. A timed-out signal
// is kept out of the pool until it does reach 0.
//
// Buffers: host memory is locked for every GPU (hsa_amd_memory_lock) and copied through the
// address the runtime returns for agents; GPU memory comes from HIP IPC handles
// (hipIpcOpenMemHandle, once per allocation while any registration uses it) or, for VMM memory
// (hipMemCreate; PyTorch's expandable segments), from file descriptors of each allocation mapped
// back to back; either is made accessible to every GPU's engines. Stream-ordered done flags are
// written by a 4-byte copy from a locked staging word, so that the write lands after the
// collective's copies.
//
// The engine calls ROCm only through hsa::Runtime and hip::Runtime tables, loaded with dlopen by
// create(); tests construct it with a stand-in that behaves as the documented API does.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/engines/engine.hpp"
#include "daemon/engines/hsa/hsa_library.hpp"
#include "daemon/engines/hsa/kfd_topology.hpp"
#include "daemon/engines/hsa/sdma_planner.hpp"
#include "daemon/engines/hsa/signal_pool.hpp"
#include "daemon/engines/split_completions.hpp"
#include "iris/shared/hip_library.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris::daemon {

class HsaEngine final : public Engine {
 public:
  // Loads ROCm; nullptr with `why_not` set when there is no usable AMD GPU and runtime.
  static std::unique_ptr<HsaEngine> create(const EngineOptions& options, const std::string& reason,
                                           std::string& why_not);
  // With runtime tables already loaded (or a test's stand-ins). `hip` may be null: GPU buffers
  // then cannot be imported, host buffers still can. Throws iris::Error when no GPU agent exists.
  HsaEngine(const hsa::Runtime& hsa, const hip::Runtime* hip, const EngineOptions& options,
            std::string reason);
  ~HsaEngine() override;

  const EngineDescription& description() const override { return description_; }
  void submit(std::span<const CopyRequest> copies) override;
  void stop() override;
  std::size_t poll(std::vector<CopyCompletion>& out) override;
  int completion_fd() const override { return event_fd_.get(); }
  bool needs_polling() const override { return !in_flight_.empty(); }
  // A timed-out copy is reported failed while its DMA may still run (see quarantined_).
  bool outlives_its_completions() const override { return true; }
  bool keeps_latency_engine(int device) const override;
  std::shared_ptr<void> prepare_host_memory(void* base, uint64_t bytes) override;
  ImportedMemory import_device_memory(const DeviceBufferExport& exported) override;
  void write_device_word(int device, std::byte* address, uint32_t value) override;

  const hsa::SdmaPlanner& planner() const { return *planner_; }
  std::size_t signals_created() const { return signals_.created(); }
  std::size_t signals_quarantined() const { return quarantined_.size(); }

 private:
  struct Gpu {
    hsa_agent_t agent;
    std::string bus_id;  // lower-case "dddd:bb:dd.f"
    int hip_device = -1;
    std::optional<hsa_amd_memory_pool_t> pool;  // its global memory, for link queries
  };
  struct InFlight {
    hsa_signal_t signal;
    hsa::PlannedPiece piece;
    uint64_t split;             // SplitCompletions id; 0 when the piece is the whole copy
    CopyCompletion completion;  // of this piece
    std::chrono::steady_clock::time_point deadline;
    int64_t staging = -1;  // a done-flag write: the staging word it copies from
    // The piece's ranges as the GPUs address them (to match a memory fault), and what keeps
    // them mapped until the DMA really ended.
    uint64_t src = 0, dst = 0;
    std::shared_ptr<const void> src_owner = {}, dst_owner = {};
  };
  // A copy reported failed whose DMA has not let go yet: its signal and memory are held until
  // the signal reaches 0.
  struct Quarantined {
    hsa_signal_t signal;
    std::shared_ptr<const void> src_owner, dst_owner;
  };
  struct LockedRange {
    uint64_t bytes;
    std::byte* agent_address;  // what the GPUs use for it
  };
  struct StagingBlock {
    uint32_t* host;
    uint32_t* agent;
  };
  struct Import {
    std::byte* base;
    uint64_t bytes;
    int device;
  };

  void discover_agents();
  // Engines per pair: the status at start-up, refined by the recommendations per link.
  void query_engines(const hsa::RecommendedMasks& recommended);
  void fill_description(uint32_t hsa_major, uint32_t hsa_minor);
  // The pair's engines; device kHostMemory is the host.
  hsa::PairEngines pair_engines(int src_device, int dst_device) const;
  hsa_agent_t agent_of(int device) const;
  // Locked host memory as the GPUs address it; GPU memory unchanged.
  void* agent_address(const std::byte* address, int device) const;
  int device_by_bus_id(const std::string& bus_id) const;
  // Throws kInvalidArgument naming both versions when the exporter's ROCm cannot share memory
  // with irisd's (one before 6.1, one after); warns when they merely differ.
  void check_runtime_match(const DeviceBufferExport& exported) const;
  // VMM allocations (hipMemCreate, exported as file descriptors) mapped back to back and made
  // accessible to every GPU. Not cached: each registration maps its own.
  ImportedMemory import_vmm(const DeviceBufferExport& exported, int device);
  // Issues one piece; false after logging when the runtime refused it.
  bool issue(const CopyRequest& copy, const hsa::PlannedPiece& piece, hsa_signal_t signal);
  // Locks host memory for every GPU; returns the address they use for it. Throws iris::Error.
  void* lock_for_gpus(void* host, uint64_t bytes, const char* what);
  int64_t take_staging_word();
  std::chrono::steady_clock::time_point deadline_for(uint64_t bytes) const;
  // GPU memory faults the runtime reported: the copies they hit fail now, as if timed out.
  void fail_faulted_copies();
  void wake();

  const hsa::Runtime& hsa_;
  const hip::Runtime* hip_;
  hip::Behaviour hip_behaviour_;  // of the HIP runtime loaded, decided at run time
  EngineDescription description_;
  hsa_agent_t cpu_{};
  std::vector<Gpu> gpus_;
  std::vector<hsa_agent_t> gpu_agents_;  // gpus_[i].agent, in order, for calls taking a list
  std::vector<hsa::PairEngines> pairs_;  // (gpus + 1)^2, host first
  bool on_engine_ = false;               // copies go to the planned engine
  uint32_t copy_timeout_ms_;
  std::optional<hsa::SdmaPlanner> planner_;
  std::vector<hsa::CopyShape> shapes_;  // submit()'s, kept with its capacity
  hsa::SignalPool signals_;
  SplitCompletions splits_;
  std::vector<InFlight> in_flight_;
  std::vector<Quarantined> quarantined_;  // timed out: back to the pool once they reach 0
  std::vector<std::pair<uint64_t, CopyCompletion>> finished_at_submit_;  // host copies, refusals
  std::map<const std::byte*, LockedRange, std::greater<>> locked_;       // by host base, descending
  std::map<std::string, std::weak_ptr<Import>> imports_;                 // by IPC handle
  std::vector<StagingBlock> staging_blocks_;
  std::vector<int64_t> free_staging_;
  net::Fd event_fd_;
};

}  // namespace iris::daemon
