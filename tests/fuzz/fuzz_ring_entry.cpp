// Fuzzes request validation and the plan of the rank's own pair: a ring entry, the communicator
// shape and an all-to-all-v argument area come from the input. Whatever validates must only ever
// yield copies inside the rank's own buffers.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "daemon/collectives/plan.hpp"
#include "daemon/collectives/request_validation.hpp"
#include "daemon/engines/engine.hpp"

using namespace iris;
using namespace iris::daemon;

namespace {
std::vector<std::byte> send_mem(4096), recv_mem(8192), args_mem(4096);
auto send = std::make_shared<MappedBuffer>(MappedBuffer{1, 1, send_mem.data(), 4096, nullptr});
auto recv = std::make_shared<MappedBuffer>(MappedBuffer{2, 1, recv_mem.data(), 8192, nullptr});
auto args = std::make_shared<MappedBuffer>(MappedBuffer{3, 1, args_mem.data(), 4096, nullptr});

void check_inside(uint64_t offset, uint64_t bytes, uint64_t size) {
  if (offset > size || bytes > size - offset) std::abort();  // a copy outside its buffer
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shm::SubmitEntry entry{};
  if (size < sizeof(entry) + 2) return 0;
  std::memcpy(&entry, data, sizeof(entry));
  const uint32_t nranks = 1 + data[sizeof(entry)] % 64;
  const uint32_t rank = data[sizeof(entry) + 1] % nranks;
  const std::size_t rest = size - sizeof(entry) - 2;
  std::memset(args_mem.data(), 0, args_mem.size());
  std::memcpy(args_mem.data(), data + sizeof(entry) + 2, std::min(rest, args_mem.size()));
  entry.send_buffer = 1 + entry.send_buffer % 4;  // mostly real ids, sometimes unknown
  entry.recv_buffer = 1 + entry.recv_buffer % 4;
  entry.args_buffer = 1 + entry.args_buffer % 4;
  BufferLookup lookup = [](uint64_t id) -> std::shared_ptr<MappedBuffer> {
    if (id == 1) return send;
    if (id == 2) return recv;
    if (id == 3) return args;
    return nullptr;
  };
  auto result = validate_request(entry, nranks, rank, lookup);
  auto* ok = std::get_if<ValidatedRequest>(&result);
  if (ok == nullptr) return 0;
  // The rank's copies to and from itself, as the scheduler would issue them.
  RankArgs self = ok->args;
  self.self_copy_done = false;
  auto pair = plan_pair(self, rank, self, rank);
  if (auto* copy = std::get_if<std::optional<PlannedCopy>>(&pair); copy && *copy) {
    if (!ok->send || !ok->recv) std::abort();
    check_inside((*copy)->src_offset, (*copy)->bytes, ok->send->bytes);
    check_inside((*copy)->dst_offset, (*copy)->bytes, ok->recv->bytes);
  }
  return 0;
}
