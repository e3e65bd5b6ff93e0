// Where ROCm's libraries are: a ROCm install puts them under $ROCM_PATH/lib or /opt/rocm/lib,
// which the loader searches only after a manual ld.so.conf step many nodes skip; and each major
// release has its own soname (libamdhip64.so.7 for ROCm 7). The HSA and HIP loaders try, in
// order, every soname under each of those folders, then the bare names.
#pragma once

#include <string>
#include <vector>

namespace iris {

// Candidate paths for `sonames` (most preferred first), given $ROCM_PATH (may be null).
std::vector<std::string> rocm_library_candidates(const char* rocm_path,
                                                 const std::vector<std::string>& sonames);

// dlopen of the first candidate that loads: the handle and the file it came from (empty
// handle with `tried` listing every failure).
struct OpenedLibrary {
  void* handle = nullptr;
  std::string path;
  std::string tried;
};
OpenedLibrary open_rocm_library(const std::vector<std::string>& sonames);

}  // namespace iris
