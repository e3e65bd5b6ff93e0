// Groups (iris/group.hpp): a thread's stream-ordered waits held back until its outermost
// group_end().
#include "iris/group.hpp"

#include <optional>
#include <vector>

#include "client/src/client_impl.hpp"
#include "client/src/group_waits.hpp"

namespace iris {

namespace {
struct Group {
  int depth = 0;
  std::vector<std::function<void()>> waits;
};
thread_local Group group;
}  // namespace

void group_start() { ++group.depth; }

void group_end() {
  if (group.depth == 0)
    throw Error(ErrorCode::kInvalidArgument, "group_end() without group_start() on this thread");
  if (--group.depth > 0) return;
  std::vector<std::function<void()>> waits;
  waits.swap(group.waits);
  std::optional<Error> first;
  for (const auto& enqueue : waits) {
    try {
      enqueue();
    } catch (const Error& e) {
      if (!first) first = e;
    }
  }
  if (first) throw *first;
}

bool in_group() { return group.depth > 0; }

void defer_to_group(std::function<void()> enqueue) { group.waits.push_back(std::move(enqueue)); }

}  // namespace iris
