// Groups (iris/group.hpp): a thread's stream-ordered waits held back until its outermost
// group_end().
#include "iris/group.hpp"

#include <optional>
#include <vector>

#include "client/src/client_impl.hpp"
#include "client/src/group_waits.hpp"

namespace iris {

namespace {
struct DeferredWait {
  std::shared_ptr<Client::Impl> client;
  GpuStream stream;
  uint32_t slot;
  uint32_t generation;
};
struct Group {
  int depth = 0;
  std::vector<DeferredWait> waits;
};
thread_local Group group;
}  // namespace

void group_start() { ++group.depth; }

void group_end() {
  if (group.depth == 0)
    throw Error(ErrorCode::kInvalidArgument, "group_end() without group_start() on this thread");
  if (--group.depth > 0) return;
  std::vector<DeferredWait> waits;
  waits.swap(group.waits);
  std::optional<Error> first;
  for (const DeferredWait& w : waits) {
    try {
      w.client->enqueue_wait_done(w.stream, w.slot, w.generation);
    } catch (const Error& e) {
      if (!first) first = e;
    }
  }
  if (first) throw *first;
}

bool defer_to_group(std::shared_ptr<Client::Impl> client, const GpuStream& stream, uint32_t slot,
                    uint32_t generation) {
  if (group.depth == 0) return false;
  group.waits.push_back({std::move(client), stream, slot, generation});
  return true;
}

}  // namespace iris
