// Translation between the wire (control.proto messages, the attach socket's frames) and the
// daemon's own types, and the protocol check, written once for both front doors (the gRPC
// service and the attach listener).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/engines/engine.hpp"
#include "daemon/sessions/buffer_registry.hpp"
#include "iris/shared/unix_socket.hpp"
#include "iris/v1/attach.pb.h"

namespace iris::daemon {

// Throws kProtocolMismatch, naming both versions and what to do, unless the client speaks this
// irisd's protocol (`client_version` as the client sent it, digits).
void require_protocol(std::string_view client_version);

// GPU memory exported as an IPC handle (cuIpcGetMemHandle or hipIpcGetMemHandle).
DeviceBufferExport ipc_export(const v1::CudaIpcBuffer& ipc, DeviceApi api);
// VMM allocations exported as file descriptors, which `fds` keeps open (the export borrows them).
DeviceBufferExport vmm_export(const v1::RegisterVmmBuffer& vmm, const std::vector<net::Fd>& fds);

v1::RegisterBufferResponse to_wire(const RegisteredBuffer& buffer);

}  // namespace iris::daemon
