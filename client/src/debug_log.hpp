// libiris's debug lines: what a job's operator may want when a resume drops something, on the
// process's stderr, only when IRIS_LOG_LEVEL=debug (libiris writes nothing otherwise: it lives
// inside other people's programs).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace iris::client {

inline bool debug_log_enabled() {
  static const bool enabled = [] {
    const char* level = std::getenv("IRIS_LOG_LEVEL");
    return level != nullptr && std::strcmp(level, "debug") == 0;
  }();
  return enabled;
}

inline void debug_log(const std::string& line) {
  if (debug_log_enabled())
    std::fprintf(stderr, "libiris[%d] debug: %s\n", ::getpid(), line.c_str());
}

}  // namespace iris::client
