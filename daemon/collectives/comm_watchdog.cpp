// See comm_watchdog.hpp.
#include "daemon/collectives/comm_watchdog.hpp"

#include <vector>

#include "daemon/collectives/collective_scheduler.hpp"
#include "daemon/collectives/communicator_registry.hpp"

namespace iris::daemon {

namespace {
constexpr std::size_t kRanksNamed = 8;
}

std::string CommWatchdog::why(const Communicator& comm, uint64_t seq) {
  const Collective& c = comm.in_flight.at(seq);
  std::string missing;
  std::size_t named = 0, count = 0;
  for (uint32_t r = 0; r < comm.nranks; ++r) {
    if (c.ranks.contains(r)) continue;
    if (++count > kRanksNamed) continue;
    missing += (named++ == 0 ? "" : ", ") + std::to_string(r);
  }
  if (count > kRanksNamed) missing += " and " + std::to_string(count - kRanksNamed) + " more";
  return "collective " + std::to_string(seq) + " of communicator '" + comm.key +
         "' waited more than " + std::to_string(comm.op_timeout.count()) +
         " ms (the communicator's timeout) for rank" + (count == 1 ? " " : "s ") + missing + " (" +
         std::to_string(c.arrived()) + " of " + std::to_string(comm.nranks) +
         " arrived): irisd broke the communicator, as NCCL's watchdog does; a rank that never "
         "called it is stuck or called another collective (iris-ctl comms shows what each waits "
         "on): re-create the communicator";
}

bool CommWatchdog::poll() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return false;
  next_check_ = now + std::chrono::milliseconds(100);
  // Broken after the walk: breaking changes the communicators' collectives.
  std::vector<std::pair<Communicator*, uint64_t>> overdue;  // and its oldest waiting collective
  for (const auto& [id, comm] : comms_.all()) {
    if (comm->op_timeout.count() == 0 || comm->broken) continue;
    for (const auto& [seq, c] : comm->in_flight) {
      if (c.arrived() == comm->nranks) continue;
      if (now - c.started >= comm->op_timeout) overdue.emplace_back(comm.get(), seq);
      break;  // the oldest waiting one started first
    }
  }
  for (const auto& [comm, seq] : overdue)
    scheduler_.break_comm(*comm, ErrorCode::kTimeout, why(*comm, seq));
  // Failures written: the next pass wakes their clients (the completer's turn).
  return !overdue.empty();
}

}  // namespace iris::daemon
