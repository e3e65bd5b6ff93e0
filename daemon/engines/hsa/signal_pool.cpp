#include "daemon/engines/hsa/signal_pool.hpp"

#include "iris/error.hpp"

namespace iris::daemon::hsa {

SignalPool::SignalPool(const Runtime& hsa, std::size_t block)
    : hsa_(hsa), block_(block == 0 ? 1 : block) {}

SignalPool::~SignalPool() {
  for (hsa_signal_t s : all_) hsa_.hsa_signal_destroy(s);
}

hsa_signal_t SignalPool::acquire() {
  if (idle_.empty()) {
    for (std::size_t i = 0; i < block_; ++i) {
      hsa_signal_t s{};
      // GPU-only: irisd polls the value and never waits on it, so no completion needs the
      // interrupt (and KFD event) a default signal raises.
      const hsa_status_t st =
          hsa_.hsa_amd_signal_create(1, 0, nullptr, HSA_AMD_SIGNAL_AMD_GPU_ONLY, &s);
      if (st != HSA_STATUS_SUCCESS) {
        if (!idle_.empty()) break;  // some were made: enough for now
        throw Error(ErrorCode::kEngineError, "hsa_amd_signal_create failed: " + hsa_.describe(st) +
                                                 " (" + std::to_string(all_.size()) +
                                                 " signals in use)");
      }
      all_.push_back(s);
      idle_.push_back(s);
    }
  }
  const hsa_signal_t s = idle_.back();
  idle_.pop_back();
  hsa_.hsa_signal_store_screlease(s, 1);
  return s;
}

void SignalPool::release(hsa_signal_t signal) { idle_.push_back(signal); }

}  // namespace iris::daemon::hsa
