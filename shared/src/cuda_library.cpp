#include "iris/shared/cuda_library.hpp"

#include <dlfcn.h>

#include <mutex>

#include "iris/shared/loaded_library.hpp"

namespace iris::cuda {

namespace {
#define IRIS_CUDA_STRINGIFY2(x) #x
#define IRIS_CUDA_STRINGIFY(x) IRIS_CUDA_STRINGIFY2(x)

using LoadResult = LoadedLibrary<Driver>;

LoadResult load() {
  LoadResult r;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    r.why_not = std::string("no NVIDIA driver: cannot load libcuda.so.1 (") + ::dlerror() + ")";
    return r;
  }
  // Each macro argument expands to its versioned symbol name (cuMemHostRegister_v2, ...).
#define IRIS_CUDA_RESOLVE(name)                                                           \
  if (!resolve(lib, IRIS_CUDA_STRINGIFY(name), r.table.name)) {                           \
    r.why_not = std::string("the NVIDIA driver is too old: libcuda.so.1 lacks ") +        \
                IRIS_CUDA_STRINGIFY(name) + " (irisd needs a CUDA 12.8 or newer driver)"; \
    return r;                                                                             \
  }
  IRIS_CUDA_DRIVER_FUNCTIONS(IRIS_CUDA_RESOLVE)
#undef IRIS_CUDA_RESOLVE
#define IRIS_CUDA_RESOLVE_OPTIONAL(name) resolve(lib, IRIS_CUDA_STRINGIFY(name), r.table.name);
  IRIS_CUDA_OPTIONAL_FUNCTIONS(IRIS_CUDA_RESOLVE_OPTIONAL)
#undef IRIS_CUDA_RESOLVE_OPTIONAL
  const CUresult init = r.table.cuInit(0);
  if (init != CUDA_SUCCESS) {
    r.why_not =
        "cuInit failed: " + r.table.describe(init) + " (no GPU, or no access to /dev/nvidia*)";
    return r;
  }
  int count = 0;
  if (r.table.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    r.why_not = "the NVIDIA driver sees no GPU";
    return r;
  }
  return r;
}
}  // namespace

std::string Driver::describe(CUresult result) const {
  const char* text = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(result, &text) != CUDA_SUCCESS ||
      text == nullptr)
    return "CUDA error " + std::to_string(static_cast<int>(result));
  return std::string(text) + " (" + std::to_string(static_cast<int>(result)) + ")";
}

const Driver* load_driver(std::string& why) {
  static const LoadResult result = load();
  return result.get(why);
}

}  // namespace iris::cuda
