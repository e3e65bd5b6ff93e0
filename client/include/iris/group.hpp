// Groups, as NCCL's ncclGroupStart/ncclGroupEnd: between group_start() and group_end() on one
// thread, a stream-ordered call enqueues its own work and its ready flag at once, but its wait
// for completion only at group_end(), after every call of the group. So the sends and receives
// of a group never wait for each other on a stream, whatever their order (a rank's send to its
// neighbour and its receive from the other one, a send to itself). Host-blocking calls are the
// same in a group or not (their submission never waits for a peer). Groups nest: the outermost
// group_end() enqueues the waits.
#pragma once

namespace iris {

void group_start();
// Throws iris::Error when a wait could not be enqueued (the other waits are still enqueued), or
// kInvalidArgument without a group_start() on this thread.
void group_end();

}  // namespace iris
