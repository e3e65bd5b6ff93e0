// The communicators of this process that are ready and not yet ended, so that their operation
// counts reach irisd when the process exits without ending them: JAX never destroys its
// communicators, and many PyTorch scripts end without destroy_process_group. The counts go to
// irisd at most once a second while a communicator runs (ncclComm::report_tally), so without
// this irisd's stats missed up to the last second of every such job: for a short one, all but its
// first operation.
#pragma once

struct ncclComm;

namespace iris::nccl {

// `comm` is ready (its init joined irisd's communicator).
void add_live_comm(ncclComm* comm);
// `comm` ends (ncclCommDestroy, ncclCommAbort): exit leaves it alone from now on.
void remove_live_comm(ncclComm* comm);

}  // namespace iris::nccl
