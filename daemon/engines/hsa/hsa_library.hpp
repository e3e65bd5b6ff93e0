// The HSA runtime (ROCr) entry points the hsa engine uses, loaded at run time (dlopen of
// libhsa-runtime64.so.1) so that irisd starts where ROCm is absent. The engine only calls through
// this table, so tests can hand it a stand-in that behaves as the documented API does.
//
// Entry points newer than Debian 12's ROCm 5.2.3 headers are declared here from ROCr's public
// API and resolved when the installed runtime has them (null otherwise):
//   hsa_amd_memory_async_copy_on_engine (ROCm 5.6), hsa_amd_memory_copy_engine_status (5.6),
//   hsa_amd_memory_get_preferred_copy_engine (7.x). An SDMA engine id is one bit
//   (HSA_AMD_SDMA_ENGINE_0 = 1 << 0 ... _15 = 1 << 15), passed as a 32-bit enum.
#pragma once

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#include <cstdint>
#include <string>

namespace iris::daemon::hsa {

// Agent attributes of ROCm 5.5 and later (absent from the 5.2.3 headers).
inline constexpr auto kAgentInfoNumSdmaEngines = static_cast<hsa_agent_info_t>(0xA10A);
inline constexpr auto kAgentInfoNumSdmaXgmiEngines = static_cast<hsa_agent_info_t>(0xA10B);
inline constexpr auto kAgentInfoDomain = static_cast<hsa_agent_info_t>(0xA00F);  // PCI domain

using CopyOnEngineFn = hsa_status_t (*)(void* dst, hsa_agent_t dst_agent, const void* src,
                                        hsa_agent_t src_agent, size_t size,
                                        uint32_t num_dep_signals, const hsa_signal_t* dep_signals,
                                        hsa_signal_t completion_signal, uint32_t engine_id,
                                        bool force_copy_on_sdma);
using CopyEngineStatusFn = hsa_status_t (*)(hsa_agent_t dst_agent, hsa_agent_t src_agent,
                                            uint32_t* engine_ids_mask);

// clang-format off
#define IRIS_HSA_FUNCTIONS(X) \
  X(hsa_init) \
  X(hsa_shut_down) \
  X(hsa_status_string) \
  X(hsa_system_get_info) \
  X(hsa_iterate_agents) \
  X(hsa_agent_get_info) \
  X(hsa_amd_agent_iterate_memory_pools) \
  X(hsa_amd_memory_pool_get_info) \
  X(hsa_amd_agent_memory_pool_get_info) \
  X(hsa_amd_signal_create) \
  X(hsa_amd_register_system_event_handler) \
  X(hsa_signal_destroy) \
  X(hsa_signal_store_screlease) \
  X(hsa_signal_load_scacquire) \
  X(hsa_amd_memory_async_copy) \
  X(hsa_amd_memory_lock) \
  X(hsa_amd_memory_unlock) \
  X(hsa_amd_agents_allow_access)
// clang-format on

struct Runtime {
#define IRIS_HSA_DECLARE(name) decltype(&::name) name = nullptr;
  IRIS_HSA_FUNCTIONS(IRIS_HSA_DECLARE)
#undef IRIS_HSA_DECLARE
  CopyOnEngineFn hsa_amd_memory_async_copy_on_engine = nullptr;           // ROCm >= 5.6
  CopyEngineStatusFn hsa_amd_memory_copy_engine_status = nullptr;         // ROCm >= 5.6
  CopyEngineStatusFn hsa_amd_memory_get_preferred_copy_engine = nullptr;  // ROCm >= 7.0

  // "HSA_STATUS_...: text" for a status code.
  std::string library;  // the file loaded
  std::string describe(hsa_status_t status) const;
};

// Checks /dev/kfd, loads libhsa-runtime64.so.1 once and calls hsa_init. Returns nullptr and sets
// `why` (naming what the operator can do) when there is no usable ROCm runtime.
const Runtime* load_runtime(std::string& why);

}  // namespace iris::daemon::hsa
