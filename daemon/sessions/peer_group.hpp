// Group membership of a peer on the attach socket, for the grants configured by group name
// (--operator-group, --latency-group): SO_PEERCRED gives the primary group only, so the
// supplementary ones come from /proc/<pid>/status while the peer's connection is open.
#pragma once

#include <sys/types.h>

#include <string>

namespace iris::daemon {

// Whether the peer (pid and gid from SO_PEERCRED) is in `group`: its primary group, or a
// supplementary one as /proc/<pid>/status lists them. Empty or unknown group: no.
bool in_group(pid_t pid, gid_t gid, const std::string& group);

}  // namespace iris::daemon
