// The RCCL build's reduction kernels, compiled by hiprtc (hip_reduce_kernels.hpp).
#include "client/nccl/hip_reduce_kernels.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/nccl/nccl_errors.hpp"
#include "iris/shared/hiprtc_library.hpp"
#include "iris/shared/kfd_gpus.hpp"

// kernels/'s headers, embedded by the build (NUL-terminated).
extern "C" const unsigned char iris_nccl_small_float_text[];
extern "C" const unsigned char iris_nccl_reduce_elements_text[];
extern "C" const unsigned char iris_nccl_reduce_kernels_text[];

namespace iris::nccl {

namespace {

const char* text(const unsigned char* embedded) { return reinterpret_cast<const char*>(embedded); }

// The LLVM name of device's instruction set, from KFD's topology (matched by PCI bus id).
std::string instruction_set(const hip::Runtime& hip, int device) {
  char bus_id[64] = {};
  HipRuntime::check(hip.hipDeviceGetPCIBusId(bus_id, sizeof bus_id - 1, device),
                    "hipDeviceGetPCIBusId");
  const std::vector<KfdGpu> gpus = read_kfd_gpus(kKfdTopology);
  const KfdGpu* gpu = find_kfd_gpu(gpus, bus_id);
  if (gpu == nullptr || gpu->gfx_target_version == 0)
    throw NcclError(ncclSystemError,
                    std::string("the reduction kernels are compiled for the GPU's instruction set, "
                                "and KFD's topology (") +
                        kKfdTopology + "/nodes/*/properties) gives no gfx_target_version for GPU " +
                        bus_id + ": is /sys mounted in this container?");
  return gfx_target_name(gpu->gfx_target_version);
}

// hiprtc's code object of kernels/reduce_kernels.hpp for `arch`.
std::vector<char> compile(const hip::Runtime& hip, const std::string& arch) {
  std::string why;
  const hiprtc::Compiler* rtc = hiprtc::load_compiler(hip.library, why);
  if (rtc == nullptr)
    throw NcclError(ncclSystemError,
                    "reductions of device memory compile their kernels with HIP's run-time "
                    "compiler: " +
                        why + " (or name ROCm's librccl.so.1 in IRISD_NCCL_FALLBACK for them)");
  const char* headers[] = {text(iris_nccl_small_float_text), text(iris_nccl_reduce_elements_text),
                           text(iris_nccl_reduce_kernels_text)};
  const char* names[] = {"small_float.hpp", "reduce_elements.hpp", "reduce_kernels.hpp"};
  hiprtcProgram program = nullptr;
  hiprtcResult result = rtc->hiprtcCreateProgram(&program, "#include \"reduce_kernels.hpp\"\n",
                                                 "iris_nccl_reduce.hip", 3, headers, names);
  if (result != HIPRTC_SUCCESS)
    throw NcclError(ncclInternalError, "hiprtcCreateProgram failed: " + rtc->describe(result));
  const auto destroy = [rtc](hiprtcProgram* p) { rtc->hiprtcDestroyProgram(p); };
  std::unique_ptr<hiprtcProgram, decltype(destroy)> owned(&program, destroy);
  // No contraction into fused multiply-adds: the host's reductions round each step.
  const std::string architecture = "--gpu-architecture=" + arch;  // hiprtc's documented form
  const char* options[] = {architecture.c_str(), "-O3", "-std=c++17", "-ffp-contract=off"};
  result = rtc->hiprtcCompileProgram(program, 4, options);
  if (result != HIPRTC_SUCCESS) {
    std::size_t size = 0;
    std::string log;
    if (rtc->hiprtcGetProgramLogSize(program, &size) == HIPRTC_SUCCESS && size > 1) {
      log.resize(size);
      if (rtc->hiprtcGetProgramLog(program, log.data()) != HIPRTC_SUCCESS) log.clear();
    }
    throw NcclError(ncclInternalError, "hiprtc (" + rtc->library +
                                           ") could not compile irisd's reduction kernels for " +
                                           arch + ": " + rtc->describe(result) + "\n" + log);
  }
  std::size_t size = 0;
  std::vector<char> code;
  if ((result = rtc->hiprtcGetCodeSize(program, &size)) == HIPRTC_SUCCESS) {
    code.resize(size);
    result = rtc->hiprtcGetCode(program, code.data());
  }
  if (result != HIPRTC_SUCCESS)
    throw NcclError(ncclInternalError, "hiprtcGetCode failed: " + rtc->describe(result));
  return code;
}

struct Kernels {
  std::mutex mutex;
  std::map<std::string, std::vector<char>> code_by_arch;
  std::map<int, std::vector<hipFunction_t>> by_device;
};

}  // namespace

hipFunction_t hip_reduce_kernel(const hip::Runtime& hip, int device, ElementType type) {
  static Kernels kernels;
  std::lock_guard lock(kernels.mutex);
  auto& loaded = kernels.by_device[device];
  if (loaded.empty()) {
    if (hip.hipModuleLoadData == nullptr || hip.hipModuleGetFunction == nullptr ||
        hip.hipModuleLaunchKernel == nullptr)
      throw NcclError(ncclUnhandledCudaError,
                      hip.library +
                          " lacks hipModuleLoadData, hipModuleGetFunction or "
                          "hipModuleLaunchKernel, which the reduction kernels need");
    const std::string arch = instruction_set(hip, device);
    auto code = kernels.code_by_arch.find(arch);
    if (code == kernels.code_by_arch.end())
      code = kernels.code_by_arch.emplace(arch, compile(hip, arch)).first;
    hipModule_t module = nullptr;
    HipRuntime::check(hip.hipModuleLoadData(&module, code->second.data()),
                      "loading the reduction kernels (hipModuleLoadData)");
    std::vector<hipFunction_t> functions;
    for (int t = 0; t < kElementTypeCount; ++t) {
      const std::string name =
          std::string("iris_nccl_reduce_") + element_name(static_cast<ElementType>(t));
      hipFunction_t f = nullptr;
      HipRuntime::check(hip.hipModuleGetFunction(&f, module, name.c_str()), "hipModuleGetFunction");
      functions.push_back(f);
    }
    loaded = std::move(functions);
  }
  return loaded[static_cast<int>(type)];
}

}  // namespace iris::nccl
