// hiprtc's loader (hiprtc_library.hpp).
#include "iris/shared/hiprtc_library.hpp"

#include <dlfcn.h>

#include "iris/shared/loaded_library.hpp"
#include "iris/shared/rocm_library.hpp"

namespace iris::hiprtc {

namespace {
using LoadResult = LoadedLibrary<Compiler>;

#define IRIS_HIPRTC_SYMBOL(name) IRIS_LIBRARY_SYMBOL(r.table, name),

LoadResult load(const std::string& hip_runtime_library) {
  LoadResult r;
  OpenedLibrary opened =
      open_rocm_library({"libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libhiprtc.so"});
  if (opened.handle == nullptr && !hip_runtime_library.empty()) {
    opened.handle = ::dlopen(hip_runtime_library.c_str(), RTLD_NOW | RTLD_LOCAL);
    opened.path = hip_runtime_library;
  }
  if (opened.handle == nullptr || (opened.path == hip_runtime_library &&
                                   ::dlsym(opened.handle, "hiprtcCreateProgram") == nullptr)) {
    r.why_not =
        "no HIP run-time compiler: cannot load libhiprtc under $ROCM_PATH/lib, /opt/rocm/lib or "
        "the loader's path (" +
        opened.tried + "), and the HIP runtime has none inside; install ROCm's hiprtc";
    return r;
  }
  r.table.library = opened.path;
  if (const char* missing = resolve_all(opened.handle, {IRIS_HIPRTC_FUNCTIONS(IRIS_HIPRTC_SYMBOL)}))
    r.why_not = opened.path + " lacks " + missing;
  return r;
}

#undef IRIS_HIPRTC_SYMBOL
}  // namespace

std::string Compiler::describe(hiprtcResult result) const {
  const char* text = hiprtcGetErrorString != nullptr ? hiprtcGetErrorString(result) : nullptr;
  const std::string code = std::to_string(static_cast<int>(result));
  return text != nullptr ? std::string(text) + " (" + code + ")" : "hiprtc error " + code;
}

const Compiler* load_compiler(const std::string& hip_runtime_library, std::string& why) {
  static const LoadResult result = load(hip_runtime_library);
  return result.get(why);
}

}  // namespace iris::hiprtc
