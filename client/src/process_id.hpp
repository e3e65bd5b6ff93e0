// The calling process's id without a system call per look. libiris checks it on every submit,
// wait and test (a forked child must not use its parent's session), and glibc no longer caches
// getpid(): measured, those syscalls were a large part of a ring round trip. Read once, and
// again in a fork's child (pthread_atfork). A child made by a raw clone() that skips the fork
// handlers, then calls libiris, is not detected.
#pragma once

#include <sys/types.h>

namespace iris {

pid_t current_pid();

}  // namespace iris
