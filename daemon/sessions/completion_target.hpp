// Where a rank's completion goes: a slot in its session's segment (see completer.hpp).
#pragma once

#include <cstdint>

namespace iris::daemon {

// A graph plan's replay (graph_plan) completes in the plan's slot, and its GPU done flag gets the
// constant 1 that the graph waits for and resets, not the generation; it holds no count in the
// session's pending requests.
struct CompletionTarget {
  uint64_t session_id;
  uint32_t slot;
  uint32_t generation;
  bool graph_plan = false;
};

}  // namespace iris::daemon
