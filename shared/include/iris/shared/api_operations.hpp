// The operations of the APIs that irisd's libraries offer over libiris (NCCL's, in the order of
// its library's OpKind): the labels under which such a library reports what each operation moved
// and where (irisd's engine, kernels on the GPU's SMs, the host), shown by `iris-ctl stats` and
// /metrics as the library's own word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>

namespace iris {

inline constexpr const char* kApiOperationNames[] = {
    "all_gather", "all_reduce", "reduce_scatter", "reduce", "broadcast",
    "all_to_all", "gather",     "scatter",        "send",   "recv"};
inline constexpr std::size_t kApiOperationCount = std::size(kApiOperationNames);

// What one report may add to one operation: a client that sends more is refused, so that no
// tenant can wrap the node's counters.
inline constexpr uint64_t kMaxApiCallsPerReport = uint64_t{1} << 40;
inline constexpr uint64_t kMaxApiBytesPerReport = uint64_t{1} << 56;

}  // namespace iris
