// Client::Impl, the session's life: attach, session calls on the attach connection, noticing
// that irisd is gone, detach; and the buffers it registers (host memory irisd allocates or
// adopts, GPU memory) and where a pointer lies among them. Submission and completion are in
// completion_slots.cpp, CUDA-graph capture in graph_capture.cpp.
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
#include "client/src/process_id.hpp"
#include "iris/shared/futex.hpp"

namespace iris {

namespace {
constexpr auto kAttachTimeout = std::chrono::milliseconds(10000);
// Session calls on the attach connection: a GPU import in irisd can take a while.
constexpr auto kSessionCallTimeout = std::chrono::milliseconds(30000);

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

Client::Impl::Impl(const ClientOptions& opts) : options(opts), owner_pid(current_pid()) {
  v1::AttachRequest request;
  request.set_client_name(options.client_name);
  client::Attached attached = client::attach(options.socket_path, request, kAttachTimeout, 4);
  attach_fd = std::move(attached.connection);
  const v1::AttachResponse& response = attached.response;
  if (attached.fds.size() != 2)
    throw Error(ErrorCode::kProtocolMismatch,
                "attach answer carried no wake descriptor and session segment");
  wake_fd = std::move(attached.fds[0]);
  session_id = response.session_id();
  resume_window = std::chrono::milliseconds(response.resume_window_ms());
  if (auto ms = env_number("IRIS_RESUME_WINDOW_MS", "milliseconds"))
    resume_window = std::chrono::milliseconds(*ms);
  if (options.resume_window) resume_window = std::max(*options.resume_window, {});
  if (auto us = env_number("IRIS_WAIT_SPIN_US", "microseconds"))
    wait_spin = std::chrono::microseconds(*us);
  if (options.wait_spin) wait_spin = std::max(*options.wait_spin, {});
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
        call_and_record(
            done_flags_mutex_,
            [&] {
              uint64_t connection = 0;
              session_call(request, "register stream done flags", {}, nullptr, &connection);
              return connection;
            },
            [&](uint64_t) { done_flags_registration_ = request; });
      });
  producer_ =
      shm::RingProducer<shm::SubmitEntry>(view.ring_control, view.ring_entries, view.ring_depth);
  slots_.resize(view.ring_depth);
  for (uint32_t i = view.ring_depth; i > 0; --i) free_slots_.push_back(i - 1);
  watch_ = std::make_unique<DaemonWatch>(
      attach_fd.get(), [this](DaemonWatch& watch) { return reattach(watch); },
      [this] { release_graph_waits(); }, [this] { release_lost_plans(); });
}

Client::Impl::~Impl() {
  // A forked child's copy must not detach the parent's session: the parent still uses it.
  if (current_pid() == owner_pid) detach();
}

void Client::Impl::check_owner() const {
  if (current_pid() != owner_pid)
    throw Error(ErrorCode::kInvalidArgument,
                "this iris::Client was attached by pid " + std::to_string(owner_pid) +
                    "; this process (pid " + std::to_string(current_pid()) +
                    ") is a fork of it and must attach its own (iris::Client::connect)");
}

void Client::Impl::detach() {
  if (detached || current_pid() != owner_pid) return;
  if (watch_) watch_->stop();  // before its connection closes; ends a resume in progress
  if (link_.load(std::memory_order_acquire) == Link::kUp && !daemon_stopped()) {
    try {
      v1::SessionRequest request;
      request.mutable_detach();
      call(request, "detach", {}, nullptr);
    } catch (const Error&) {
      // Closing the attach socket below ends the session anyway.
    }
  }
  detached = true;
  attach_fd = net::Fd();
}

v1::SessionResponse Client::Impl::session_call(const v1::SessionRequest& request, const char* what,
                                               const std::vector<int>& fds,
                                               std::vector<net::Fd>* received,
                                               uint64_t* connection) {
  check_owner();
  const auto deadline = deadline_after(resume_window + kAttachTimeout);
  wait_while_resuming(deadline);
  for (;;) {
    uint64_t on = 0;
    try {
      auto response = call(request, what, fds, received, &on);
      if (connection != nullptr) *connection = on;
      return response;
    } catch (const Error& e) {
      // The connection broke under the call: if the session resumes, the call goes to the next
      // irisd (the previous one's answer, if it made one, died with it), and so on while irisd
      // keeps restarting within the deadline.
      if (e.code() != ErrorCode::kDaemonGone || !resumed_since(on, deadline)) throw;
    }
  }
}

bool Client::Impl::resumed_since(uint64_t connection,
                                 std::chrono::steady_clock::time_point deadline) {
  if (detached || resume_window.count() == 0) return false;
  auto up = [this] { return link_.load(std::memory_order_acquire) == Link::kUp; };
  // The watch may not have seen the hang-up yet.
  for (auto pause = std::chrono::milliseconds(1);
       up() && net::peer_closed(attach_fd.get()) && std::chrono::steady_clock::now() < deadline;
       pause = std::min(pause * 2, std::chrono::milliseconds(20)))
    std::this_thread::sleep_for(pause);
  wait_while_resuming(deadline);
  // Only a session resumed since goes on: an irisd that is still there but did not answer may
  // have done what was asked.
  return up() && connection_.load(std::memory_order_acquire) != connection;
}

v1::SessionResponse Client::Impl::call(const v1::SessionRequest& request, const char* what,
                                       const std::vector<int>& fds, std::vector<net::Fd>* received,
                                       uint64_t* connection) {
  return *exchange(request, what, fds, received, connection, std::nullopt);
}

std::optional<v1::SessionResponse> Client::Impl::call_on(uint64_t connection,
                                                         const v1::SessionRequest& request,
                                                         const char* what,
                                                         const std::vector<int>& fds) {
  return exchange(request, what, fds, nullptr, nullptr, connection);
}

std::optional<v1::SessionResponse> Client::Impl::call_naming(
    CommRank& comm, const std::function<void(v1::SessionRequest&, uint64_t id)>& name,
    const char* what, uint64_t* connection) {
  check_owner();
  const auto deadline = deadline_after(resume_window + kAttachTimeout);
  for (;;) {
    uint64_t id = 0, on = 0;
    {
      std::lock_guard lock(comms_mutex_);
      id = comm.id.load(std::memory_order_relaxed);
      on = comm.connection;
    }
    v1::SessionRequest request;
    name(request, id);
    try {
      if (auto answer = call_on(on, request, what)) {
        if (connection != nullptr) *connection = on;
        return answer;
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kDaemonGone || !resumed_since(on, deadline)) throw;
    }
    wait_while_resuming(deadline);
    throw_if_daemon_gone();
    std::lock_guard lock(comms_mutex_);
    // Destroyed before a resume read it: no irisd holds it any more.
    if (comm.destroyed && comm.connection == on) return std::nullopt;
    if (std::chrono::steady_clock::now() >= deadline)
      throw Error(ErrorCode::kDaemonGone,
                  std::string(what) + ": irisd did not come back within the resume window");
  }
}

void Client::Impl::destroy(CommRank& comm) {
  {
    std::lock_guard lock(comms_mutex_);
    comm.destroyed = true;
  }
  call_naming(
      comm,
      [](v1::SessionRequest& request, uint64_t id) {
        request.mutable_comm_destroy()->set_comm_id(id);
      },
      "communicator destroy");
}

std::optional<v1::SessionResponse> Client::Impl::exchange(
    const v1::SessionRequest& request, const char* what, const std::vector<int>& fds,
    std::vector<net::Fd>* received, uint64_t* connection, std::optional<uint64_t> only_on) {
  v1::SessionResponse response;
  {
    // One call at a time on the connection: each frame is answered by the next one.
    std::lock_guard lock(attach_mutex_);
    if (only_on && *only_on != connection_.load(std::memory_order_relaxed)) return std::nullopt;
    if (connection != nullptr) *connection = connection_.load(std::memory_order_relaxed);
    if (!attach_fd || !net::send_frame(attach_fd.get(), request.SerializeAsString(), fds))
      throw Error(ErrorCode::kDaemonGone,
                  std::string(what) + ": irisd closed the session (stopped, or ended it)");
    auto frame = net::recv_frame(attach_fd.get(), kSessionCallTimeout, 1);
    if (!frame || !response.ParseFromString(frame->payload))
      throw Error(ErrorCode::kDaemonGone,
                  std::string(what) + ": irisd did not answer (stopped, or the session ended)");
    if (received != nullptr) *received = std::move(frame->fds);
  }
  if (response.error_code() != 0)
    throw Error(static_cast<ErrorCode>(response.error_code()),
                std::string(what) + ": " + response.error_message());
  if (response.has_registered()) {
    // Past every id this session was given: a resume asks the next irisd to give none of them
    // again (a registration the resume dropped may still be named until its next lookup).
    const uint64_t next = response.registered().buffer_id() + 1;
    uint64_t seen = next_buffer_id_.load(std::memory_order_relaxed);
    while (next > seen && !next_buffer_id_.compare_exchange_weak(seen, next)) {
    }
  }
  return response;
}

bool Client::Impl::daemon_stopped() const {
  return view.header->daemon_state.load(std::memory_order_acquire) ==
         static_cast<uint32_t>(shm::DaemonState::kStopped);
}

bool Client::Impl::daemon_gone() const {
  return detached || link_.load(std::memory_order_acquire) == Link::kGone;
}

void Client::Impl::check_daemon() {
  if (link_.load(std::memory_order_acquire) == Link::kGone || daemon_stopped())
    throw_if_daemon_gone();
}

void Client::Impl::release_stream_waits() {
  std::lock_guard lock(slots_mutex_);
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].in_use) continue;
    stream_flags->release(i, slots_[i].generation);
  }
  release_graph_waits();
}

void Client::Impl::release_graph_waits() {
  // A replay waits for its plan's done flag (1) and then resets it: the daemon watch stores 1
  // again every few milliseconds, so later replays go on too.
  std::lock_guard plans(plans_mutex_);
  for (uint32_t p = 0; p < plan_slot_used_.size(); ++p)
    if (plan_slot_used_[p]) stream_flags->release(view.ring_depth + p, 1);
}

void Client::Impl::release_lost_plans() {
  std::lock_guard plans(plans_mutex_);
  bool any = false;
  for (uint32_t p = 0; p < plan_slot_used_.size(); ++p) {
    if (!plan_slot_used_[p] || !plan_records_[p].lost) continue;
    stream_flags->release(view.ring_depth + p, 1);
    any = true;
  }
  if (!any && watch_) watch_->set_tending(false);  // their graphs were destroyed
}

void Client::Impl::throw_if_daemon_gone() {
  if (!daemon_gone()) return;
  if (detached) throw Error(ErrorCode::kDaemonGone, "this client has detached");
  std::lock_guard lock(link_mutex_);
  throw Error(ErrorCode::kDaemonGone, gone_why_);
}

std::shared_ptr<CommRank> Client::Impl::join(v1::SessionRequest& request, const std::string& key,
                                             uint32_t nranks, uint32_t rank) {
  auto* init = request.mutable_comm_init();
  init->set_key(key);
  init->set_nranks(nranks);
  init->set_rank(rank);
  auto joined = std::make_shared<CommRank>();
  joined->key = key;
  joined->nranks = nranks;
  joined->rank = rank;
  joined->node_addresses.assign(init->node_addresses().begin(), init->node_addresses().end());
  joined->node_of_rank.assign(init->node_of_rank().begin(), init->node_of_rank().end());
  joined->secret = init->secret();
  joined->op_timeout_ms = init->op_timeout_ms();
  v1::SessionResponse answer;
  return call_and_record(
      comms_mutex_,
      [&] {
        uint64_t connection = 0;
        answer = session_call(request, "communicator init", {}, nullptr, &connection);
        return connection;
      },
      [&](uint64_t connection) {
        joined->id = answer.comm_id();
        joined->resume_secret = answer.comm_secret();
        joined->connection = connection;
        std::erase_if(comms_, [](const std::weak_ptr<CommRank>& c) { return c.expired(); });
        comms_.push_back(joined);
        return joined;
      });
}

Client::Impl::HostAllocation Client::Impl::allocate_host(std::size_t bytes, const char* what) {
  v1::SessionRequest request;
  request.mutable_allocate_host()->set_bytes(bytes);
  std::vector<net::Fd> fds;
  uint64_t connection = 0;
  const auto response = session_call(request, what, {}, &fds, &connection);
  if (fds.size() != 1)
    throw Error(ErrorCode::kProtocolMismatch,
                std::string(what) + ": no memory came with the answer");
  try {
    return {response.registered().buffer_id(), shm::ShmSegment::map(std::move(fds[0])), connection};
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kProtocolMismatch, e.what());
  }
}

Buffer Client::Impl::allocate(std::size_t bytes) {
  for (;;) {
    auto allocation = allocate_host(bytes, "allocate");
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
    HostAllocation allocation = allocate_host(size, "register host memory");
    auto memfd = std::make_shared<const net::Fd>(allocation.segment.take_fd());
    allocation.segment = shm::ShmSegment();  // written through the descriptor, not mapped here
    auto error = [](const char* doing) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string("register host memory: ") + doing + ": " + std::strerror(errno));
    };
    auto give_back = [&] {
      try {
        deregister(allocation.id, allocation.connection);
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

uint64_t Client::Impl::register_gpu(GpuRuntime& runtime, GpuVendor vendor, void* device_ptr,
                                    std::size_t bytes, uint64_t resume_id, uint64_t* connection) {
  ExportedGpuBuffer exported = export_gpu_buffer(runtime, device_ptr, bytes);
  v1::SessionRequest request;
  std::vector<int> fds;
  if (exported.ipc) {
    *request.mutable_register_ipc() = register_request(vendor, *exported.ipc);
    request.mutable_register_ipc()->set_resume_buffer_id(resume_id);
  } else {
    *request.mutable_register_vmm() = exported.vmm;
    request.mutable_register_vmm()->set_resume_buffer_id(resume_id);
    for (const net::Fd& fd : exported.fds) fds.push_back(fd.get());
  }
  // Resuming, the resume's own connection carries it (the session is not up yet).
  if (resume_id != 0)
    return call(request, "register GPU buffer again", fds, nullptr).registered().buffer_id();
  return session_call(request, "register GPU buffer", fds, nullptr, connection)
      .registered()
      .buffer_id();
}

Buffer Client::Impl::register_gpu_buffer(GpuVendor vendor, void* device_ptr, std::size_t bytes) {
  const std::unique_ptr<GpuRuntime> runtime = make_gpu_runtime(vendor);
  for (;;) {
    uint64_t connection = 0;
    const uint64_t id = register_gpu(*runtime, vendor, device_ptr, bytes, 0, &connection);
    if (auto buffer = add_buffer(id, connection, device_ptr, bytes, nullptr, true, nullptr, vendor))
      return std::move(*buffer);
  }
}

GpuRegistrationCache* Client::Impl::gpu_cache() {
  std::lock_guard lock(gpu_cache_mutex_);
  if (!gpu_cache_tried_) {
    gpu_cache_tried_ = true;
    if (engine == "cuda" && options.gpu_registration_cache > 0) {
      try {
        gpu_cache_runtime_ = make_gpu_runtime(GpuVendor::kCuda);
        gpu_cache_ = std::make_unique<GpuRegistrationCache>(*gpu_cache_runtime_, *this,
                                                            options.gpu_registration_cache);
      } catch (const Error&) {
        // No CUDA driver here: no GPU memory to register either.
      }
    }
  }
  return gpu_cache_.get();
}

GpuRegistrationCache* Client::Impl::existing_gpu_cache() {
  std::lock_guard lock(gpu_cache_mutex_);
  return gpu_cache_.get();
}

GpuRegistrationCache::Session::Registration Client::Impl::register_range(void* base,
                                                                         std::size_t bytes) {
  Registration made{};
  made.buffer_id =
      register_gpu(*gpu_cache_runtime_, GpuVendor::kCuda, base, bytes, 0, &made.connection);
  return made;
}

void Client::Impl::deregister(uint64_t buffer_id, uint64_t connection) {
  if (detached || daemon_gone()) return;
  v1::SessionRequest request;
  request.mutable_deregister()->set_buffer_id(buffer_id);
  check_owner();
  try {
    call_on(connection, request, "free buffer");
  } catch (const Error& e) {
    // That irisd went, and the buffer with it: no resume carried it.
    if (e.code() != ErrorCode::kDaemonGone) throw;
  }
}

bool Client::Impl::finished(uint32_t slot, uint32_t generation) const {
  if (poll(slot, generation)) return true;
  std::lock_guard lock(slots_mutex_);
  return slots_[slot].generation != generation || !slots_[slot].in_use;
}

std::optional<Buffer> Client::Impl::add_buffer(uint64_t id, uint64_t connection, void* base,
                                               std::size_t bytes,
                                               std::shared_ptr<shm::ShmSegment> mapping, bool gpu,
                                               std::shared_ptr<const net::Fd> memfd,
                                               GpuVendor vendor,
                                               const std::function<void()>& map_in) {
  {
    std::lock_guard lock(buffers_mutex_);
    if (!answered_by_current_irisd(connection)) return std::nullopt;
    if (map_in) map_in();
    buffers_[reinterpret_cast<uintptr_t>(base)] = {id, bytes, gpu, vendor, std::move(memfd)};
  }
  return Buffer(
      std::make_shared<Buffer::Impl>(shared_from_this(), id, base, bytes, std::move(mapping)));
}

void Client::Impl::forget_buffer(uint64_t id, void* base) {
  uint64_t connection = 0;
  {
    std::lock_guard lock(buffers_mutex_);
    buffers_.erase(reinterpret_cast<uintptr_t>(base));
    connection = current_connection();
  }
  try {
    deregister(id, connection);
  } catch (const Error&) {
    // The session's end frees it anyway.
  }
}

std::array<std::optional<BufferLocation>, 2> Client::Impl::locate(
    std::array<const void*, 2> ptrs) const {
  std::array<std::optional<BufferLocation>, 2> found;
  std::lock_guard lock(buffers_mutex_);
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    if (ptrs[i] == nullptr) continue;
    const auto p = reinterpret_cast<uintptr_t>(ptrs[i]);
    auto it = buffers_.upper_bound(p);
    if (it == buffers_.begin()) continue;
    --it;
    const uintptr_t base = it->first;
    if (p - base > it->second.bytes) continue;  // one past the end is a 0-byte range
    found[i] =
        BufferLocation{it->second.id, p - base, it->second.bytes - (p - base), it->second.gpu};
  }
  return found;
}

}  // namespace iris
