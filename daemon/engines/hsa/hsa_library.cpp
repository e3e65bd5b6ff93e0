#include "daemon/engines/hsa/hsa_library.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include "iris/shared/loaded_library.hpp"
#include "iris/shared/rocm_library.hpp"

namespace iris::daemon::hsa {

namespace {
using LoadResult = LoadedLibrary<Runtime>;

LoadResult load() {
  LoadResult r;
  // hsa_init on a machine without the amdgpu kernel driver fails with a bare status code; say
  // what is missing instead.
  if (::access("/dev/kfd", F_OK) != 0) {
    r.why_not = "no /dev/kfd: no AMD GPU, or the amdgpu kernel driver is not loaded";
    return r;
  }
  if (::access("/dev/kfd", R_OK | W_OK) != 0) {
    r.why_not =
        "/dev/kfd exists but irisd may not open it: run irisd in the render group (and video on "
        "older distributions), as deploy/irisd.service does";
    return r;
  }
  const OpenedLibrary opened = open_rocm_library({"libhsa-runtime64.so.1"});
  void* lib = opened.handle;
  if (lib == nullptr) {
    r.why_not =
        "no ROCm runtime: cannot load libhsa-runtime64.so.1 under $ROCM_PATH/lib, "
        "/opt/rocm/lib or the loader's path (" +
        opened.tried + "); install ROCm's hsa-rocr package";
    return r;
  }
  r.table.library = opened.path;
#define IRIS_HSA_SYMBOL(name) IRIS_LIBRARY_SYMBOL(r.table, name),
  if (const char* missing = resolve_all(lib, {IRIS_HSA_FUNCTIONS(IRIS_HSA_SYMBOL)})) {
    r.why_not = std::string("the ROCm runtime is too old: libhsa-runtime64 lacks ") + missing;
    return r;
  }
  // ROCm >= 5.7 only (Debian's 5.2.3 lacks them): optional.
  resolve_all(lib, {IRIS_HSA_SYMBOL(hsa_amd_memory_async_copy_on_engine)
                        IRIS_HSA_SYMBOL(hsa_amd_memory_copy_engine_status)
                            IRIS_HSA_SYMBOL(hsa_amd_memory_get_preferred_copy_engine)});
#undef IRIS_HSA_SYMBOL
  const hsa_status_t init = r.table.hsa_init();
  if (init != HSA_STATUS_SUCCESS) {
    r.why_not = "hsa_init failed: " + r.table.describe(init);
    return r;
  }
  return r;
}
}  // namespace

std::string Runtime::describe(hsa_status_t status) const {
  const char* text = nullptr;
  const std::string code = std::to_string(static_cast<int>(status));
  if (hsa_status_string == nullptr || hsa_status_string(status, &text) != HSA_STATUS_SUCCESS ||
      text == nullptr)
    return "HSA status " + code;
  return std::string(text) + " (" + code + ")";
}

const Runtime* load_runtime(std::string& why) {
  static const LoadResult result = load();
  return result.get(why);
}

}  // namespace iris::daemon::hsa
