// Client::Impl, the session's life: attach (assembling the parts), detach, noticing that irisd is
// gone; and making the buffers the caller gets (host memory irisd allocates or adopts, GPU
// memory) from the registrations; submit() over the submissions (a captured call becomes a
// graph plan instead: graph_capture.cpp). The resume is in session_resume.cpp.
#include "client/src/client_impl.hpp"

#include <sched.h>
#include <unistd.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "client/src/attach_handshake.hpp"
#include "client/src/buffer_impl.hpp"
#include "client/src/group_waits.hpp"
#include "client/src/process_id.hpp"
#include "client/src/request_impl.hpp"
#include "iris/shared/futex.hpp"

namespace iris {

namespace {
constexpr auto kAttachTimeout = std::chrono::milliseconds(10000);

// An environment variable holding a whole number of `unit`; nullopt when unset or empty.
// Throws iris::Error naming it when it holds anything else.
std::optional<unsigned long long> env_number(const char* name, const char* unit) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(env, &end, 10);
  if (*end != '\0' || errno != 0 || *env == '-')
    throw Error(ErrorCode::kInvalidArgument,
                std::string(name) + " must be a number of " + unit + ", got '" + env + "'");
  return value;
}
}  // namespace

Client::Impl::Impl(const ClientOptions& opts) : options(opts) {
  v1::AttachRequest request;
  request.set_client_name(options.client_name);
  client::Attached attached = client::attach(options.socket_path, request, kAttachTimeout, 4);
  const v1::AttachResponse& response = attached.response;
  if (attached.fds.size() != 2)
    throw Error(ErrorCode::kProtocolMismatch,
                "attach answer carried no wake descriptor and session segment");
  session_id = response.session_id();
  // How long this client waits for irisd to come back: ClientOptions, else
  // $IRIS_RESUME_WINDOW_MS, else irisd's --resume-window-ms.
  auto resume_window = std::chrono::milliseconds(response.resume_window_ms());
  if (auto ms = env_number("IRIS_RESUME_WINDOW_MS", "milliseconds"))
    resume_window = std::chrono::milliseconds(*ms);
  if (options.resume_window) resume_window = std::max(*options.resume_window, {});
  if (auto us = env_number("IRIS_WAIT_SPIN_US", "microseconds"))
    wait_spin = std::chrono::microseconds(*us);
  if (options.wait_spin) wait_spin = std::max(*options.wait_spin, {});
  link = std::make_unique<DaemonLink>(std::move(attached.connection), std::move(attached.fds[0]),
                                      resume_window);
  registrations = std::make_unique<Registrations>(*link);
  comms = std::make_unique<Communicators>(*link);
  engine = response.engine();
  daemon_version = response.daemon_version();
  latest_daemon_version_ = daemon_version;
  try {
    segment = shm::ShmSegment::map(std::move(attached.fds[1]));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kProtocolMismatch, e.what());
  }
  auto validated = shm::validate_segment(segment.data(), segment.size());
  if (!validated || validated->ring_depth != response.ring_depth())
    throw Error(ErrorCode::kProtocolMismatch, "the session segment has an unknown layout");
  view = *validated;
  stream_flags = std::make_unique<StreamFlagsMapping>(
      segment.data(), segment.size(), view.flags, view.slot_count(),
      [this](const v1::RegisterIpcBuffer& flags) {
        v1::SessionRequest request;
        *request.mutable_register_ipc() = flags;
        request.mutable_register_ipc()->set_stream_done_flags(true);
        registrations->register_done_flags(request);
      });
  submissions =
      std::make_unique<Submissions>(view, *link, *registrations, *stream_flags, wait_spin);
  plans = std::make_unique<CapturedPlans>(view, *link, *comms, *submissions, *stream_flags,
                                          options.submit_timeout);
  watch_ = std::make_unique<DaemonWatch>(
      link->attach_fd(), [this](DaemonWatch& watch) { return reattach(watch); },
      [this] { plans->release_waits(); },
      [this] {
        // None left: their graphs were destroyed.
        if (!plans->release_lost() && watch_) watch_->set_tending(false);
      });
}

Client::Impl::~Impl() {
  // A forked child's copy must not detach the parent's session: the parent still uses it.
  if (link && link->owned_here()) detach();
}

void Client::Impl::detach() {
  if (link->detached() || !link->owned_here()) return;
  if (watch_) watch_->stop();  // before its connection closes; ends a resume in progress
  if (link->up() && !daemon_stopped()) {
    try {
      v1::SessionRequest request;
      request.mutable_detach();
      link->resume_call(request, "detach");
    } catch (const Error&) {
      // Closing the attach socket below ends the session anyway.
    }
  }
  link->close();
}

bool Client::Impl::daemon_stopped() const {
  return view.header->daemon_state.load(std::memory_order_acquire) ==
         static_cast<uint32_t>(shm::DaemonState::kStopped);
}

void Client::Impl::check_daemon() {
  if (link->gone() || daemon_stopped()) link->throw_if_gone();
}

void Client::Impl::release_stream_waits() {
  submissions->release_stream_waits();
  plans->release_waits();
}

Request Client::Impl::submit(shm::SubmitEntry entry, CommRank* comm, bool sequenced,
                             std::optional<GpuStream> stream, std::optional<StreamCopy> own_block,
                             std::span<const uint64_t> v_args, HeldRegistrations* held) {
  check_owner();
  // Only the cheap check here: a crashed daemon is noticed by the wait.
  if (link->detached()) throw Error(ErrorCode::kDaemonGone, "this client has detached");
  check_daemon();
  // Under capture the call becomes a graph plan: no ring slot, no ring entry.
  if (stream && stream_flags->capturing(*stream)) {
    if (comm == nullptr)
      throw Error(ErrorCode::kInvalidArgument, "only a communicator's calls can be captured");
    capture_graph_plan(entry, *comm, *stream, own_block, v_args);
    if (held != nullptr) held->submitted(std::nullopt);  // the graph replays them
    return Request();
  }
  const auto deadline = deadline_after(options.submit_timeout);
  auto request = std::make_shared<Request::Impl>(shared_from_this());
  uint32_t generation = 0;
  const uint32_t slot = submissions->acquire_slot(deadline, &request->outcome, &generation);
  request->slot = slot;
  request->generation = generation;
  entry.slot = slot;
  entry.generation = generation;
  try {
    if (!v_args.empty()) submissions->stage_args(slot, v_args, entry);
    if (stream) {
      if (own_block)
        stream_flags->enqueue_copy(*stream, own_block->dst, own_block->src, own_block->bytes);
      stream_flags->enqueue_ready(*stream, slot, generation);
    }
  } catch (const Error&) {
    submissions->release_slot(slot);
    throw;
  }
  submissions->push(entry, comm, sequenced, slot, deadline);
  request->in_flight = true;
  if (held != nullptr) held->submitted(GpuRegistrationCache::Use{slot, generation});
  // After the push: the request is in flight whatever happens here, and a failure to enqueue
  // the wait is reported while the Request still tracks the slot.
  Request submitted(std::move(request));
  if (stream && in_group()) {
    defer_to_group([self = shared_from_this(), s = *stream, slot, generation] {
      self->stream_flags->enqueue_wait_done(s, slot, generation);
    });
  } else if (stream) {
    stream_flags->enqueue_wait_done(*stream, slot, generation);
  }
  return submitted;
}

Buffer Client::Impl::allocate(std::size_t bytes) {
  for (;;) {
    auto allocation = registrations->allocate_host(bytes, "allocate");
    auto memfd = std::make_shared<const net::Fd>(allocation.segment.take_fd());
    auto mapping = std::make_shared<shm::ShmSegment>(std::move(allocation.segment));
    void* base = mapping->data();
    if (auto buffer = add_buffer(allocation.id, allocation.connection, base, bytes,
                                 std::move(mapping), false, std::move(memfd)))
      return std::move(*buffer);
  }
}

namespace {
// Whether [begin, end) lies inside private, writable, anonymous mappings of this process.
bool private_anonymous_writable(uintptr_t begin, uintptr_t end) {
  std::ifstream maps("/proc/self/maps");
  uintptr_t covered = begin;
  for (std::string line; std::getline(maps, line) && covered < end;) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, path;
    fields >> range >> perms >> offset >> device >> inode;
    std::getline(fields, path);
    const auto dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (hi <= covered || lo > covered) continue;
    const bool anonymous = inode == "0" && (path.find_first_not_of(' ') == std::string::npos ||
                                            path.find("[heap]") != std::string::npos);
    if (perms.substr(0, 2) != "rw" || perms[3] != 'p' || !anonymous) return false;
    covered = hi;
  }
  return covered >= end;
}
}  // namespace

Buffer Client::Impl::register_host(void* ptr, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(ptr);
  if (ptr == nullptr || begin % page != 0)
    throw Error(ErrorCode::kInvalidArgument, "register_host: the address must be page-aligned (" +
                                                 std::to_string(page) +
                                                 " bytes); allocate with mmap, or aligned_alloc(" +
                                                 std::to_string(page) + ", ...)");
  if (bytes == 0) throw Error(ErrorCode::kInvalidArgument, "register_host: 0 bytes");
  const std::size_t size = (bytes + page - 1) / page * page;
  if (!private_anonymous_writable(begin, begin + size))
    throw Error(ErrorCode::kInvalidArgument,
                "register_host: [address, +" + std::to_string(size) +
                    ") is not all private, writable, anonymous memory of this process (a file "
                    "mapping, read-only or shared memory cannot be moved)");
  for (;;) {
    Registrations::HostAllocation allocation =
        registrations->allocate_host(size, "register host memory");
    auto memfd = std::make_shared<const net::Fd>(allocation.segment.take_fd());
    allocation.segment = shm::ShmSegment();  // written through the descriptor, not mapped here
    auto error = [](const char* doing) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string("register host memory: ") + doing + ": " + std::strerror(errno));
    };
    auto give_back = [&] {
      try {
        registrations->deregister(allocation.id, allocation.connection);
      } catch (const Error&) {
        // The session's end frees it.
      }
    };
    // The contents go into irisd's memory first; then that memory replaces the pages at the same
    // addresses (MAP_FIXED swaps them in one step, so no other thread sees a hole).
    if (::pwrite(memfd->get(), ptr, size, 0) != static_cast<ssize_t>(size)) {
      const Error failed = error("copying the contents");
      give_back();
      throw failed;
    }
    auto swap_in = [&] {
      if (::mmap(ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd->get(), 0) ==
          MAP_FAILED)
        throw error("mapping it in place");
    };
    std::optional<Buffer> buffer;
    try {
      buffer = add_buffer(allocation.id, allocation.connection, ptr, size, nullptr, false, memfd,
                          GpuVendor::kCuda, swap_in);
    } catch (const Error&) {
      give_back();
      throw;
    }
    if (buffer) return std::move(*buffer);
  }
}

Buffer Client::Impl::share(const Buffer::Impl& other) {
  if (other.client.get() == this)
    throw Error(ErrorCode::kInvalidArgument,
                "share: the Buffer is this client's already; share a Buffer of another Client");
  const std::shared_ptr<const net::Fd> memfd = other.client->registrations->memfd_of(other.data);
  if (!memfd)
    throw Error(ErrorCode::kInvalidArgument,
                "share: only host memory from allocate() or register_host() can be shared; "
                "register GPU memory with each client (register_cuda_buffer, "
                "register_hip_buffer)");
  for (;;) {
    v1::SessionRequest request;
    request.mutable_share_host()->set_bytes(other.bytes);
    uint64_t connection = 0;
    const auto response =
        link->session_call(request, "share host memory", {memfd->get()}, nullptr, &connection);
    if (auto buffer = add_buffer(response.registered().buffer_id(), connection, other.data,
                                 other.bytes, other.mapping, false, memfd))
      return std::move(*buffer);
  }
}

Buffer Client::Impl::register_gpu_buffer(GpuVendor vendor, void* device_ptr, std::size_t bytes) {
  const std::unique_ptr<GpuRuntime> runtime = make_gpu_runtime(vendor);
  for (;;) {
    uint64_t connection = 0;
    const uint64_t id =
        registrations->register_gpu(*runtime, vendor, device_ptr, bytes, 0, &connection);
    if (auto buffer = add_buffer(id, connection, device_ptr, bytes, nullptr, true, nullptr, vendor))
      return std::move(*buffer);
  }
}

GpuRegistrationCache* Client::Impl::gpu_cache() {
  return registrations->gpu_cache(engine == "cuda", options.gpu_registration_cache, *this);
}

std::optional<Buffer> Client::Impl::add_buffer(uint64_t id, uint64_t connection, void* base,
                                               std::size_t bytes,
                                               std::shared_ptr<shm::ShmSegment> mapping, bool gpu,
                                               std::shared_ptr<const net::Fd> memfd,
                                               GpuVendor vendor,
                                               const std::function<void()>& map_in) {
  if (!registrations->record(id, connection, base, bytes, gpu, std::move(memfd), vendor, map_in))
    return std::nullopt;
  return Buffer(
      std::make_shared<Buffer::Impl>(shared_from_this(), id, base, bytes, std::move(mapping)));
}

}  // namespace iris
