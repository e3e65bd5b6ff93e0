// NCCL's memory functions. ncclMemAlloc gives what irisd moves without a copy: host memory shared
// with irisd on its host engine, device memory on a GPU engine. Registrations and windows are
// accepted and change nothing: irisd registers GPU memory on first use and keeps it while the
// allocation lives, which is what NCCL's registration asks for. NCCL's device API has no
// counterpart on copy engines and is refused with the reason.
#include <string>

#include "client/nccl/gpu_context.hpp"
#include "client/nccl/nccl_errors.hpp"

using iris::nccl::check_comm;
using iris::nccl::guarded;
using iris::nccl::NcclError;

namespace {

// What ncclCommRegister and ncclCommWindowRegister hand out: the range, so that deregistering
// can be checked.
struct Registration {
  void* ptr;
  size_t size;
};

}  // namespace

struct ncclWindow_vidmem : Registration {};

extern "C" {

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guarded("ncclMemAlloc", [&] {
    if (ptr == nullptr) throw NcclError(ncclInvalidArgument, "ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return ncclSuccess;
    auto& clients = iris::nccl::ProcessClients::instance();
    *ptr = clients.engine() == "host" ? clients.allocate_host(size)
                                      : iris::nccl::allocate_device(size);
    return ncclSuccess;
  });
}

ncclResult_t ncclMemFree(void* ptr) {
  return guarded("ncclMemFree", [&] {
    if (ptr == nullptr || iris::nccl::ProcessClients::instance().free_host(ptr)) return ncclSuccess;
    iris::nccl::free_device(ptr);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded("ncclCommRegister", [&] {
    check_comm(comm);
    if (buff == nullptr || handle == nullptr)
      throw NcclError(ncclInvalidArgument, "buff and handle must not be NULL");
    *handle = new Registration{buff, size};
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded("ncclCommDeregister", [&] {
    check_comm(comm);
    if (handle == nullptr) throw NcclError(ncclInvalidArgument, "handle is NULL");
    delete static_cast<Registration*>(handle);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags) {
  return guarded("ncclCommWindowRegister", [&] {
    check_comm(comm);
    if (buff == nullptr || win == nullptr)
      throw NcclError(ncclInvalidArgument, "buff and win must not be NULL");
    *win = new ncclWindow_vidmem{{buff, size}};
    return ncclSuccess;
  });
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guarded("ncclCommWindowDeregister", [&] {
    check_comm(comm);
    if (win == nullptr) throw NcclError(ncclInvalidArgument, "win is NULL");
    delete win;
    return ncclSuccess;
  });
}

ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                               struct ncclDevComm* outDevComm) {
  return guarded("ncclDevCommCreate", [&]() -> ncclResult_t {
    throw NcclError(ncclInvalidUsage,
                    "NCCL's device API (kernels that communicate themselves) has no counterpart "
                    "on irisd's copy engines; use the host-side collectives");
  });
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm) {
  return guarded("ncclDevCommDestroy", [&]() -> ncclResult_t {
    throw NcclError(ncclInvalidUsage,
                    "no device communicator exists here (ncclDevCommCreate is not available)");
  });
}

}  // extern "C"
