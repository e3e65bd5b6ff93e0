#include "iris/shared/cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace iris::cuda {

namespace {
#define IRIS_CUDA_STRINGIFY2(x) #x
#define IRIS_CUDA_STRINGIFY(x) IRIS_CUDA_STRINGIFY2(x)

struct LoadResult {
  Driver driver;
  bool ok = false;
  std::string why;
};

LoadResult load() {
  LoadResult r;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    r.why = std::string("no NVIDIA driver: cannot load libcuda.so.1 (") + ::dlerror() + ")";
    return r;
  }
  // Each macro argument expands to its versioned symbol name (cuMemHostRegister_v2, ...).
#define IRIS_CUDA_RESOLVE(name)                                                           \
  r.driver.name =                                                                         \
      reinterpret_cast<decltype(r.driver.name)>(::dlsym(lib, IRIS_CUDA_STRINGIFY(name))); \
  if (r.driver.name == nullptr) {                                                         \
    r.why = std::string("the NVIDIA driver is too old: libcuda.so.1 lacks ") +            \
            IRIS_CUDA_STRINGIFY(name) + " (irisd needs a CUDA 12.8 or newer driver)";     \
    return r;                                                                             \
  }
  IRIS_CUDA_DRIVER_FUNCTIONS(IRIS_CUDA_RESOLVE)
#undef IRIS_CUDA_RESOLVE
#define IRIS_CUDA_RESOLVE_OPTIONAL(name) \
  r.driver.name =                        \
      reinterpret_cast<decltype(r.driver.name)>(::dlsym(lib, IRIS_CUDA_STRINGIFY(name)));
  IRIS_CUDA_OPTIONAL_FUNCTIONS(IRIS_CUDA_RESOLVE_OPTIONAL)
#undef IRIS_CUDA_RESOLVE_OPTIONAL
  const CUresult init = r.driver.cuInit(0);
  if (init != CUDA_SUCCESS) {
    r.why = "cuInit failed: " + r.driver.describe(init) + " (no GPU, or no access to /dev/nvidia*)";
    return r;
  }
  int count = 0;
  if (r.driver.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    r.why = "the NVIDIA driver sees no GPU";
    return r;
  }
  r.ok = true;
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
  if (!result.ok) {
    why = result.why;
    return nullptr;
  }
  return &result.driver;
}

}  // namespace iris::cuda
