#include "daemon/sessions/peer_group.hpp"

#include <grp.h>

#include <fstream>
#include <sstream>

namespace iris::daemon {

bool in_group(pid_t pid, gid_t gid, const std::string& group) {
  if (group.empty()) return false;
  const ::group* g = ::getgrnam(group.c_str());
  if (g == nullptr) return false;
  if (g->gr_gid == gid) return true;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Groups:", 0) != 0) continue;
    std::istringstream groups(line.substr(7));
    for (gid_t supplementary; groups >> supplementary;)
      if (supplementary == g->gr_gid) return true;
  }
  return false;
}

}  // namespace iris::daemon
