#include "iris/shared/cuda_library.hpp"

#include <dlfcn.h>

#include <mutex>

#include "iris/shared/loaded_library.hpp"

namespace iris::cuda {

namespace {
using LoadResult = LoadedLibrary<Driver>;

LoadResult load() {
  LoadResult r;
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    r.why_not = std::string("no NVIDIA driver: cannot load libcuda.so.1 (") + ::dlerror() + ")";
    return r;
  }
#define IRIS_CUDA_SYMBOL(name) IRIS_LIBRARY_SYMBOL(r.table, name),
  if (const char* missing = resolve_all(lib, {IRIS_CUDA_DRIVER_FUNCTIONS(IRIS_CUDA_SYMBOL)})) {
    r.why_not = std::string("the NVIDIA driver is too old: libcuda.so.1 lacks ") + missing +
                " (irisd needs a CUDA 12.8 or newer driver)";
    return r;
  }
  resolve_all(lib, {IRIS_CUDA_OPTIONAL_FUNCTIONS(IRIS_CUDA_SYMBOL)});
#undef IRIS_CUDA_SYMBOL
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
