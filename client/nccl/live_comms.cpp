// The process's live communicators, reported at exit (live_comms.hpp).
#include "client/nccl/live_comms.hpp"

#include <cstdlib>
#include <mutex>
#include <set>

#include "client/nccl/nccl_comm.hpp"

namespace iris::nccl {

namespace {

struct LiveComms {
  std::mutex mutex;
  std::set<ncclComm*> comms;
  bool exit_handler_registered = false;
};

LiveComms& live() {
  // Never destroyed: the exit handler reads it after static destruction may have begun.
  static auto* comms = new LiveComms();
  return *comms;
}

void report_at_exit() {
  LiveComms& l = live();
  std::lock_guard lock(l.mutex);
  for (ncclComm* comm : l.comms) comm->report_at_exit();
}

}  // namespace

void add_live_comm(ncclComm* comm) {
  LiveComms& l = live();
  std::lock_guard lock(l.mutex);
  l.comms.insert(comm);
  if (!l.exit_handler_registered) l.exit_handler_registered = std::atexit(report_at_exit) == 0;
}

void remove_live_comm(ncclComm* comm) {
  LiveComms& l = live();
  std::lock_guard lock(l.mutex);
  l.comms.erase(comm);
}

}  // namespace iris::nccl
