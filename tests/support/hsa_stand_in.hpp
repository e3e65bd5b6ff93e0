// A stand-in for the ROCm runtime (HSA and the HIP calls irisd makes), for testing the hsa engine
// where no AMD GPU exists. Test code only: it is linked into the unit tests, never into irisd.
//
// It behaves as the documented API does, as far as the engine can tell: agents (one CPU, N GPUs
// with PCI bus ids, global memory pools and xGMI links), signals that a copy decrements to 0 when
// it finishes, copies that run on a worker thread after the call returns, host memory that must
// be locked and then addressed through the agent pointer hsa_amd_memory_lock returned (here an
// alias that differs from the host address), engine ids that must be one bit, HIP IPC handles
// opened and closed, and HIP VMM imports (a file descriptor mapped into a reserved range). "GPU
// memory" is host memory the stand-in owns. Faults: copies whose signals are lost, and copies
// queued on an engine the status did not offer, which never finish (as a queue on a fused-off
// MI308X engine hangs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/engines/hsa/hsa_library.hpp"
#include "iris/shared/hip_library.hpp"

namespace iris::test {

struct StandInNode {
  int gpus = 2;
  // Engines the status query offers / recommends for copies src -> dst (-1: host memory).
  std::function<uint32_t(int src, int dst)> available = [](int, int) { return 0b1100u; };
  std::function<uint32_t(int src, int dst)> preferred;  // empty: no recommendation
  bool copy_on_engine = true;  // hsa_amd_memory_async_copy_on_engine and the status query exist
  // hipRuntimeGetVersion; the HIP calls behave as that release does (see hip::Behaviour): the
  // IPC open flag it accepts, how hipMemImportFromShareableHandle reads the fd, whether
  // hipMemRetainAllocationHandle takes a reference.
  int hip_version = 60200000;
};

struct StandInCopy {
  int src_device;  // -1: host
  int dst_device;
  uint32_t engine;  // 0: hsa_amd_memory_async_copy (the runtime's choice)
  bool forced_sdma;
  uint64_t bytes;
};

class HsaStandIn {
 public:
  // One at a time: the entry points reach it through a global.
  explicit HsaStandIn(StandInNode node);
  ~HsaStandIn();
  HsaStandIn(const HsaStandIn&) = delete;
  HsaStandIn& operator=(const HsaStandIn&) = delete;

  const daemon::hsa::Runtime& hsa() const { return hsa_; }
  const hip::Runtime& hip() const { return hip_; }
  // The one stream hipStreamIsCapturing reports as capturing.
  static hipStream_t capturing_stream() { return reinterpret_cast<hipStream_t>(0xCA97); }

  // GPU memory of `device` and the IPC handle hipIpcGetMemHandle would give for it.
  std::byte* gpu_alloc(int device, std::size_t bytes);
  std::string ipc_handle(const std::byte* allocation) const;
  std::string bus_id(int device) const;  // as HIP prints it (upper case)

  void lose_next_signals(int count);  // the next copies finish but never signal
  void signal_lost_copies();          // ... until now: they signal late
  void wait_idle() const;             // every queued copy has run

  std::vector<StandInCopy> copies() const;
  int ipc_opens() const;
  int ipc_closes() const;
  int signals_alive() const;
  int locked_ranges() const;
  int hung_copies() const;
  int vmm_ranges() const;    // VMM address ranges reserved and not yet freed
  int vmm_mappings() const;  // VMM allocations mapped into reserved ranges and not unmapped
  // Calls the real runtime would have crashed on (an fd passed where 6.x reads a pointer), and
  // GPU memory faults with no handler registered (ROCr aborts the process then).
  int crashes() const;
  // A GPU memory fault at `address` on `device`, reported as ROCr reports it.
  void inject_memory_fault(int device, const void* address);
  // Signals created with hsa_amd_signal_create(HSA_AMD_SIGNAL_AMD_GPU_ONLY) / without it.
  int gpu_only_signals() const;
  int interrupt_signals() const;

  // Client side: VMM memory as hipMemCreate + hipMemMap would give the owner (one reference,
  // the owner's), and whether it is still alive (references left).
  std::byte* vmm_alloc(int device, std::size_t bytes);
  bool vmm_alive(const std::byte* allocation) const;

  struct State;

 private:
  daemon::hsa::Runtime hsa_;
  hip::Runtime hip_;
};

}  // namespace iris::test
