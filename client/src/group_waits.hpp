// What a submission asks of the thread's group (group.cpp): hold a stream-ordered request's wait
// for completion until the group ends.
#pragma once

#include <cstdint>
#include <memory>

#include "client/src/client_impl.hpp"

namespace iris {

// True when this thread is in a group: the wait is then enqueued at its group_end().
bool defer_to_group(std::shared_ptr<Client::Impl> client, const GpuStream& stream, uint32_t slot,
                    uint32_t generation);

}  // namespace iris
