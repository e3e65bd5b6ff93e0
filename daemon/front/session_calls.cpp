#include "daemon/front/session_calls.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "daemon/front/wire.hpp"

namespace iris::daemon {

namespace {
// A communicator's operation timeout fits irisd's clocks with room to spare (2^31 ms).
constexpr uint64_t kMaxOpTimeoutMs = uint64_t{1} << 31;

// The one memfd a request about host memory carries, irisd's own copy of it.
net::Fd the_memfd(const std::vector<net::Fd>& fds, const char* doing) {
  if (fds.size() != 1)
    throw Error(ErrorCode::kInvalidArgument, std::string(doing) +
                                                 " takes its memfd beside the request, got " +
                                                 std::to_string(fds.size()) + " descriptors");
  net::Fd memfd(::fcntl(fds[0].get(), F_DUPFD_CLOEXEC, 0));
  if (!memfd)
    throw Error(ErrorCode::kLimitExceeded,
                std::string("irisd is out of descriptors: ") + std::strerror(errno));
  return memfd;
}
}  // namespace

SessionCallResult handle_session_call(Runtime& runtime, uint64_t id, const std::string& payload,
                                      const std::vector<net::Fd>& fds) {
  SessionCallResult result;
  v1::SessionResponse& response = result.response;
  try {
    v1::SessionRequest request;
    if (!request.ParseFromString(payload))
      throw Error(ErrorCode::kInvalidArgument, "malformed request on the attach socket");
    switch (request.kind_case()) {
      case v1::SessionRequest::kRegisterVmm: {
        const DeviceBufferExport exported = vmm_export(request.register_vmm(), fds);
        *response.mutable_registered() = to_wire(runtime.register_device_buffer(
            id, exported, request.register_vmm().resume_buffer_id()));
        break;
      }
      case v1::SessionRequest::kAllocateHost: {
        RegisteredBuffer b = runtime.register_buffer(id, request.allocate_host().bytes());
        *response.mutable_registered() = to_wire(b);
        result.memfd = std::move(b.memfd);
        break;
      }
      case v1::SessionRequest::kRegisterIpc: {
        const auto& ipc = request.register_ipc();
        const DeviceBufferExport exported =
            ipc_export(ipc.buffer(), ipc.hip() ? DeviceApi::kHip : DeviceApi::kCuda);
        if (ipc.stream_done_flags()) {
          runtime.register_device_done_flags(id, exported);
        } else {
          *response.mutable_registered() =
              to_wire(runtime.register_device_buffer(id, exported, ipc.resume_buffer_id()));
        }
        break;
      }
      case v1::SessionRequest::kAdoptHost:
        runtime.adopt_host_buffer(id, request.adopt_host().buffer_id(),
                                  request.adopt_host().bytes(),
                                  the_memfd(fds, "resuming a host buffer"));
        break;
      case v1::SessionRequest::kShareHost:
        *response.mutable_registered() = to_wire(runtime.share_host_buffer(
            id, request.share_host().bytes(), the_memfd(fds, "sharing host memory")));
        break;
      case v1::SessionRequest::kDeregister:
        runtime.deregister_buffer(id, request.deregister().buffer_id());
        break;
      case v1::SessionRequest::kCommInit: {
        const auto& init = request.comm_init();
        if (init.op_timeout_ms() > kMaxOpTimeoutMs)
          throw Error(ErrorCode::kInvalidArgument,
                      "communicator timeout of " + std::to_string(init.op_timeout_ms()) +
                          " ms: at most " + std::to_string(kMaxOpTimeoutMs) +
                          " ms (24 days); pass 0 for none");
        if (init.traffic_class() > static_cast<uint32_t>(RequestedClass::kBulk))
          throw Error(ErrorCode::kInvalidArgument, "traffic class " +
                                                       std::to_string(init.traffic_class()) +
                                                       ": 0 auto (by size), 1 latency or 2 bulk");
        std::optional<Runtime::NodesOfComm> nodes;
        if (init.node_addresses_size() > 0 || init.node_of_rank_size() > 0 ||
            !init.secret().empty())
          nodes = Runtime::NodesOfComm{{init.node_addresses().begin(), init.node_addresses().end()},
                                       {init.node_of_rank().begin(), init.node_of_rank().end()},
                                       init.secret()};
        CommunicatorRegistry::Resume resume{
            init.resume_seq(),
            {init.completed_seqs().begin(), init.completed_seqs().end()},
            init.comm_secret(),
            {}};
        for (const auto& p : init.p2p_progress())
          resume.p2p_progress.push_back(
              {p.peer(), p.send(), p.done_below(), {p.done_after().begin(), p.done_after().end()}});
        const uint64_t comm_id =
            runtime.comm_init(id, init.key(), init.nranks(), init.rank(), std::move(nodes), resume,
                              CommSettings{std::chrono::milliseconds(init.op_timeout_ms()),
                                           static_cast<RequestedClass>(init.traffic_class())});
        response.set_comm_id(comm_id);
        response.set_comm_secret(runtime.comms().find(comm_id)->secret);
        break;
      }
      case v1::SessionRequest::kCommDestroy:
        runtime.comm_destroy(id, request.comm_destroy().comm_id());
        break;
      case v1::SessionRequest::kRegisterPlan: {
        const std::string& bytes = request.register_plan().entry();
        if (bytes.size() != sizeof(shm::SubmitEntry))
          throw Error(ErrorCode::kInvalidArgument,
                      "a graph plan's entry must be " + std::to_string(sizeof(shm::SubmitEntry)) +
                          " bytes, got " + std::to_string(bytes.size()));
        shm::SubmitEntry entry;
        std::memcpy(&entry, bytes.data(), sizeof(entry));
        runtime.register_graph_plan(id, entry, request.register_plan().plan_slot(),
                                    request.register_plan().resumed(),
                                    request.register_plan().completed_replays());
        break;
      }
      case v1::SessionRequest::kReleasePlan:
        runtime.release_graph_plan(id, request.release_plan().plan_slot());
        break;
      case v1::SessionRequest::kNodeAddress:
        response.set_node_address(runtime.node_address());
        break;
      case v1::SessionRequest::kReportApiWork:
        runtime.add_api_work(request.report_api_work());
        break;
      case v1::SessionRequest::kMeetingPoint:
        response.set_meeting_point(runtime.meeting_address());
        break;
      case v1::SessionRequest::kCommStatus: {
        const auto [joined, total] = runtime.comm_nodes_joined(id, request.comm_status().comm_id());
        response.set_nodes_joined(joined);
        response.set_nodes_total(total);
        break;
      }
      case v1::SessionRequest::kDetach:
        runtime.end_session(id, false);
        result.detached = true;
        break;
      default:
        throw Error(ErrorCode::kInvalidArgument,
                    "unknown request on the attach socket (a libiris newer than this irisd?)");
    }
  } catch (const Error& e) {
    response.set_error_code(static_cast<uint32_t>(e.code()));
    response.set_error_message(e.message());
  } catch (const std::exception& e) {
    response.set_error_code(static_cast<uint32_t>(ErrorCode::kInternal));
    response.set_error_message(e.what());
  }
  return result;
}

}  // namespace iris::daemon
