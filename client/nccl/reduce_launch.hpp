// The arguments of one reduction kernel launch (kernels/reduce_kernels.hpp's signature) and its
// grid, as both GPU sides pass them to their launch call (cuLaunchKernel, hipModuleLaunchKernel):
// an array of pointers to the values, which therefore live in this object and never move.
#pragma once

#include <algorithm>

#include "client/nccl/element_types.hpp"
#include "client/nccl/operation_plan.hpp"
#include "client/nccl/operation_runner.hpp"

namespace iris::nccl {

class ReduceLaunch {
 public:
  static constexpr unsigned kThreads = 256;
  static constexpr unsigned long long kMaxBlocks = 4096;  // then each thread loops

  ReduceLaunch(const LocalStep& s, const Reduction& r, const AreaBases& bases)
      : src_(bases.at(s.from)),
        blocks_(s.blocks),
        stride_(s.stride),
        count_(s.count),
        dst_(bases.at(s.to)),
        op_(static_cast<int>(r.kind)),
        scalar_bits_(r.scalar_bits),
        scalar_at_(r.scalar_at),
        grid_(static_cast<unsigned>(std::min((count_ + kThreads - 1) / kThreads, kMaxBlocks))) {}
  ReduceLaunch(const ReduceLaunch&) = delete;
  ReduceLaunch& operator=(const ReduceLaunch&) = delete;

  void** args() { return args_; }
  unsigned grid() const { return std::max(grid_, 1u); }

 private:
  const char* src_;
  unsigned blocks_;
  unsigned long long stride_, count_;
  char* dst_;
  int op_;
  unsigned long long scalar_bits_;
  const void* scalar_at_;
  unsigned grid_;
  void* args_[8] = {&src_, &blocks_, &stride_, &count_, &dst_, &op_, &scalar_bits_, &scalar_at_};
};

}  // namespace iris::nccl
