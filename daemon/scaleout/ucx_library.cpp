#include "daemon/scaleout/ucx_library.hpp"

#include <dlfcn.h>

#include "iris/shared/loaded_library.hpp"

namespace iris::daemon::ucx {

namespace {
LoadedLibrary<Library> load_once() {
  LoadedLibrary<Library> r;
  void* lib = ::dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    r.why_not = std::string("UCX is not installed (cannot load libucp.so.0: ") + ::dlerror() +
                "); install libucx0 or the site's UCX";
    return r;
  }
  // ucs_status_string lives in libucs, which libucp depends on: found through the same handle.
#define IRIS_UCX_SYMBOL(name) IRIS_LIBRARY_SYMBOL(r.table, name),
  if (const char* missing = resolve_all(lib, {IRIS_UCX_FUNCTIONS(IRIS_UCX_SYMBOL)}))
    r.why_not = std::string("the UCX found (libucp.so.0) lacks ") + missing +
                " (irisd needs UCX 1.12 or newer)";
#undef IRIS_UCX_SYMBOL
  return r;
}
}  // namespace

const Library* load(std::string& why) {
  static const LoadedLibrary<Library> loaded = load_once();
  return loaded.get(why);
}

}  // namespace iris::daemon::ucx
