// What a submission asks of the thread's group (group.cpp): hold a stream-ordered request's wait
// for completion until the group ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "client/src/client_impl.hpp"

namespace iris {

// Whether this thread is in a group.
bool in_group();
// Holds `enqueue` (a stream's wait for completion) until the thread's outermost group_end().
void defer_to_group(std::function<void()> enqueue);

}  // namespace iris
