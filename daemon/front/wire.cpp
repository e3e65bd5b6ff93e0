#include "daemon/front/wire.hpp"

#include "iris/error.hpp"
#include "iris/shared/version.hpp"

namespace iris::daemon {

void require_protocol(std::string_view client_version) {
  for (uint32_t v = kOldestClientProtocol; v <= kProtocolVersion; ++v)
    if (client_version == std::to_string(v)) return;
  throw Error(ErrorCode::kProtocolMismatch,
              "client speaks protocol '" + std::string(client_version) + "', irisd " +
                  std::string(release_version()) + " speaks " + std::to_string(kProtocolVersion) +
                  " and serves clients of protocol " + std::to_string(kOldestClientProtocol) +
                  " to " + std::to_string(kProtocolVersion) +
                  ": use libiris and iris-ctl from this irisd release or the one before");
}

DeviceBufferExport ipc_export(const v1::CudaIpcBuffer& ipc, DeviceApi api) {
  return DeviceBufferExport{api,         ipc.handle(), ipc.bus_id(), ipc.offset(),
                            ipc.bytes(), {},           {},           ipc.runtime_version()};
}

DeviceBufferExport vmm_export(const v1::RegisterVmmBuffer& vmm, const std::vector<net::Fd>& fds) {
  DeviceBufferExport exported{vmm.hip() ? DeviceApi::kHip : DeviceApi::kCuda,
                              "",
                              vmm.bus_id(),
                              vmm.offset(),
                              vmm.bytes(),
                              {},
                              {},
                              vmm.runtime_version()};
  for (const net::Fd& f : fds) exported.vmm_fds.push_back(f.get());
  exported.vmm_chunk_bytes.assign(vmm.chunk_bytes().begin(), vmm.chunk_bytes().end());
  if (exported.vmm_fds.empty())
    throw Error(ErrorCode::kInvalidArgument, "VMM registration without file descriptors");
  return exported;
}

v1::RegisterBufferResponse to_wire(const RegisteredBuffer& buffer) {
  v1::RegisterBufferResponse out;
  out.set_buffer_id(buffer.id);
  out.set_bytes(buffer.bytes);
  return out;
}

}  // namespace iris::daemon
