#include "iris/shared/hip_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "iris/shared/loaded_library.hpp"
#include "iris/shared/rocm_library.hpp"

namespace iris::hip {

namespace {
using LoadResult = LoadedLibrary<Runtime>;

LoadResult load() {
  LoadResult r;
  const OpenedLibrary opened = open_rocm_library(
      {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"});
  void* lib = opened.handle;
  if (lib == nullptr) {
    r.why_not =
        "no HIP runtime: cannot load libamdhip64 under $ROCM_PATH/lib, /opt/rocm/lib or "
        "the loader's path (" +
        opened.tried + ")";
    return r;
  }
  r.table.library = opened.path;
#define IRIS_HIP_SYMBOL(name) IRIS_LIBRARY_SYMBOL(r.table, name),
  if (const char* missing = resolve_all(
          lib, {IRIS_HIP_RUNTIME_FUNCTIONS(IRIS_HIP_SYMBOL) IRIS_HIP_SYMBOL(hipMalloc)})) {
    r.why_not = std::string("the HIP runtime is too old: libamdhip64 lacks ") + missing +
                " (irisd needs ROCm 5.2 or newer)";
    return r;
  }
  resolve_all(lib, {IRIS_HIP_SYMBOL(hipStreamIsCapturing) IRIS_HIP_SYMBOL(hipModuleLoadData)
                        IRIS_HIP_SYMBOL(hipModuleGetFunction)
                            IRIS_HIP_SYMBOL(hipModuleLaunchKernel)});  // optional
#undef IRIS_HIP_SYMBOL
  int count = 0;
  const hipError_t e = r.table.hipGetDeviceCount(&count);
  if (e != hipSuccess || count == 0) {
    r.why_not = "the HIP runtime sees no AMD GPU (" +
                (e != hipSuccess ? r.table.describe(e) : std::string("0 devices")) + ")";
    return r;
  }
  return r;
}
}  // namespace

std::string Runtime::describe(hipError_t result) const {
  const char* text = hipGetErrorString != nullptr ? hipGetErrorString(result) : nullptr;
  const std::string code = std::to_string(static_cast<int>(result));
  return text != nullptr ? std::string(text) + " (" + code + ")" : "HIP error " + code;
}

Behaviour behaviour_of(int v) {
  Behaviour b;
  b.version = v;
  b.text = std::to_string(v / 10000000) + "." + std::to_string(v / 100000 % 100) + "." +
           std::to_string(v % 100000);
  const bool six_or_later = v >= 60000000;
  b.ipc_lazy_peer_access_flag = six_or_later ? 0x1u : 0u;
  b.import_fd_by_pointer = six_or_later && v < 70100000;
  b.retain_takes_reference = !six_or_later;
  return b;
}

bool streamops_cp_wait_requested() {
  const char* value = std::getenv("GPU_STREAMOPS_CP_WAIT");
  if (value == nullptr) return false;
  const std::string text = value;
  return text == "true" || text == "TRUE" || text == "True" || std::atoi(value) != 0;
}

const Runtime* load_runtime(std::string& why) {
  static const LoadResult result = load();
  return result.get(why);
}

}  // namespace iris::hip
