#include "client/src/cuda_export.hpp"

#include "iris/error.hpp"

#ifdef IRIS_HAVE_CUDA
#include "iris/shared/cuda_driver.hpp"
#endif

namespace iris {

#ifdef IRIS_HAVE_CUDA
v1::CudaIpcBuffer export_cuda_buffer(void* device_ptr, std::size_t bytes) {
  std::string why;
  const cuda::Driver* cu = cuda::load_driver(why);
  if (cu == nullptr) throw Error(ErrorCode::kUnavailable, "cannot register a GPU buffer: " + why);
  const auto ptr = reinterpret_cast<CUdeviceptr>(device_ptr);
  auto check = [&](CUresult r, const char* what) {
    if (r != CUDA_SUCCESS)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("cannot register GPU buffer: ") + what + ": " + cu->describe(r));
  };
  int ordinal = -1;
  check(cu->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr),
        "not device memory of this process");
  CUdevice device;
  char bus[64] = {};
  check(cu->cuDeviceGet(&device, ordinal), "cuDeviceGet");
  check(cu->cuDeviceGetPCIBusId(bus, sizeof(bus), device), "cuDeviceGetPCIBusId");
  CUdeviceptr base = 0;
  size_t size = 0;
  check(cu->cuMemGetAddressRange(&base, &size, ptr), "cuMemGetAddressRange");
  const std::size_t offset = ptr - base;
  if (bytes == 0 || bytes > size - offset)
    throw Error(ErrorCode::kOutOfRange, "GPU buffer range of " + std::to_string(bytes) +
                                            " bytes at offset " + std::to_string(offset) +
                                            " does not fit its allocation of " +
                                            std::to_string(size) + " bytes");
  CUipcMemHandle handle;
  check(cu->cuIpcGetMemHandle(&handle, base),
        "cuIpcGetMemHandle (VMM allocations such as PyTorch's expandable segments are not "
        "supported yet)");
  v1::CudaIpcBuffer out;
  out.set_handle(std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
  out.set_bus_id(bus);
  out.set_offset(offset);
  out.set_bytes(bytes);
  return out;
}
#else
v1::CudaIpcBuffer export_cuda_buffer(void*, std::size_t) {
  throw Error(ErrorCode::kUnavailable, "libiris was built without CUDA support");
}
#endif

}  // namespace iris
