// Completion signals for the hsa engine's copies, created in blocks and reused: never one created
// and destroyed per copy (signal creation allocates and can take an interrupt event, and a
// destroyed signal a late copy still writes is a use after free).
#pragma once

#include <cstddef>
#include <vector>

#include "daemon/engines/hsa/hsa_library.hpp"

namespace iris::daemon::hsa {

class SignalPool {
 public:
  explicit SignalPool(const Runtime& hsa, std::size_t block = 64);
  ~SignalPool();
  SignalPool(const SignalPool&) = delete;
  SignalPool& operator=(const SignalPool&) = delete;

  // A signal with value 1 (a copy decrements it to 0 when done). Throws iris::Error
  // kEngineError when the runtime cannot create more.
  hsa_signal_t acquire();
  // Back to the pool; the caller knows no copy will write it any more.
  void release(hsa_signal_t signal);

  std::size_t created() const { return all_.size(); }
  std::size_t idle() const { return idle_.size(); }

 private:
  const Runtime& hsa_;
  std::size_t block_;
  std::vector<hsa_signal_t> all_;
  std::vector<hsa_signal_t> idle_;
};

}  // namespace iris::daemon::hsa
