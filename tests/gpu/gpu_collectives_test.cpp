// Every collective besides all-gather (tested in gpu_allgather_test.cpp) on the GPU through a
// real irisd with the cuda engine: blocking and stream-ordered (producer kernel, collective,
// checking kernel on one stream, no host synchronisation between them), receive in GPU memory
// and in pinned host memory, cudaMalloc and VMM buffers. Without an NVIDIA GPU each test skips.
#include <gtest/gtest.h>

#include "tests/gpu/gpu_test.hpp"

namespace iris::testing {
namespace {

struct Variant {
  std::string collective;
  std::vector<std::string> args;
  std::string name;
};

class GpuCollective : public GpuTest, public ::testing::WithParamInterface<Variant> {};

TEST_P(GpuCollective, EveryByteArrivesFromTheRightRank) {
  const Variant& v = GetParam();
  std::vector<std::string> args = {"--key",        v.collective, "--collective", v.collective,
                                   "--iterations", "6",          "--max-bytes",  "4194304"};
  args.insert(args.end(), v.args.begin(), v.args.end());
  expect_ok(run_ranks(3, args));
}

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (const char* c : {"all_to_all", "all_to_all_v", "broadcast", "gather", "scatter"}) {
    out.push_back({c, {}, std::string(c) + "_Blocking"});
    out.push_back({c, {"--stream"}, std::string(c) + "_StreamOrdered"});
    out.push_back({c, {"--stream", "--host-recv"}, std::string(c) + "_StreamOrderedIntoHost"});
    out.push_back({c, {"--vmm", "--stream"}, std::string(c) + "_VmmStreamOrdered"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Collectives, GpuCollective, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace iris::testing
