#include "iris/shared/rocm_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>

namespace iris {

std::vector<std::string> rocm_library_candidates(const char* rocm_path,
                                                 const std::vector<std::string>& sonames) {
  std::vector<std::string> folders;
  if (rocm_path != nullptr && *rocm_path != '\0')
    folders.push_back(std::string(rocm_path) + "/lib/");
  folders.push_back("/opt/rocm/lib/");
  folders.push_back("");  // the loader's own search path
  std::vector<std::string> out;
  for (const std::string& name : sonames)
    for (const std::string& folder : folders) out.push_back(folder + name);
  return out;
}

OpenedLibrary open_rocm_library(const std::vector<std::string>& sonames) {
  OpenedLibrary r;
  for (const std::string& candidate : rocm_library_candidates(std::getenv("ROCM_PATH"), sonames)) {
    r.handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (r.handle != nullptr) {
      link_map* map = nullptr;
      r.path = ::dlinfo(r.handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr ? map->l_name
                                                                                : candidate;
      return r;
    }
    r.tried += std::string(r.tried.empty() ? "" : "; ") + ::dlerror();
  }
  return r;
}

}  // namespace iris
