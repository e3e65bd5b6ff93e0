#include "client/src/client_impl.hpp"

#include <sched.h>
#include <unistd.h>

#include <sys/mman.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "client/src/attach_handshake.hpp"
#include "iris/shared/cpu_relax.hpp"
#include "iris/shared/futex.hpp"

namespace iris {

namespace {
using clock = std::chrono::steady_clock;
// How long wait() polls before it sleeps: long enough to catch small collectives without a
// syscall, short enough not to burn a core the rank's own work needs.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(50);
constexpr auto kPureSpin = std::chrono::microseconds(2);
// How often a sleeping waiter checks that irisd is still there.
constexpr auto kLivenessInterval = std::chrono::milliseconds(20);
constexpr auto kAttachTimeout = std::chrono::milliseconds(10000);
// Session calls on the attach connection: a GPU import in irisd can take a while.
constexpr auto kSessionCallTimeout = std::chrono::milliseconds(30000);

clock::time_point deadline_after(std::chrono::nanoseconds timeout) {
  const auto now = clock::now();
  if (timeout >= clock::time_point::max() - now) return clock::time_point::max();
  return now + std::chrono::duration_cast<clock::duration>(timeout);
}
}  // namespace

std::string describe_failure(ErrorCode code) {
  switch (code) {
    case ErrorCode::kPeerLost:
      return "another rank of the communicator died or left; re-create the communicator";
    case ErrorCode::kSizeMismatch:
      return "the ranks passed different byte counts to this collective (for all_to_all_v: what "
             "one rank sends another differs from what that rank expects)";
    case ErrorCode::kSequenceError:
      return "sequence number reused or skipped (ranks submitted collectives out of order)";
    case ErrorCode::kOutOfRange:
      return "an offset or size lies past the end of a registered buffer (the daemon log names "
             "it)";
    case ErrorCode::kNotFound:
      return "unknown buffer or communicator for this session";
    case ErrorCode::kInvalidArgument:
      return "malformed request (the daemon log says which field)";
    case ErrorCode::kLimitExceeded:
      return "too many requests in flight: on one communicator (irisd's --max-inflight) or in "
             "one session (more than its completion slots, the ring depth)";
    case ErrorCode::kEngineError:
      return "the copy engine failed a transfer (see the daemon log)";
    default:
      return "collective failed; some rank passed a bad request (see the daemon log)";
  }
}

Client::Impl::Impl(const ClientOptions& opts) : options(opts), owner_pid(::getpid()) {
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
  engine = response.engine();
  daemon_version = response.daemon_version();
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
        session_call(request, "register stream done flags");
      });
  producer_ =
      shm::RingProducer<shm::SubmitEntry>(view.ring_control, view.ring_entries, view.ring_depth);
  slots_.resize(view.ring_depth);
  for (uint32_t i = view.ring_depth; i > 0; --i) free_slots_.push_back(i - 1);
}

Client::Impl::~Impl() {
  // A forked child's copy must not detach the parent's session: the parent still uses it.
  if (::getpid() == owner_pid) detach();
}

void Client::Impl::check_owner() const {
  if (::getpid() != owner_pid)
    throw Error(ErrorCode::kInvalidArgument,
                "this iris::Client was attached by pid " + std::to_string(owner_pid) +
                    "; this process (pid " + std::to_string(::getpid()) +
                    ") is a fork of it and must attach its own (iris::Client::connect)");
}

void Client::Impl::detach() {
  if (detached || ::getpid() != owner_pid) return;
  detached = true;
  if (!daemon_gone()) {
    try {
      v1::SessionRequest request;
      request.mutable_detach();
      session_call(request, "detach");
    } catch (const Error&) {
      // Closing the attach socket below ends the session anyway.
    }
  }
  attach_fd = net::Fd();
}

v1::SessionResponse Client::Impl::session_call(const v1::SessionRequest& request, const char* what,
                                               const std::vector<int>& fds,
                                               std::vector<net::Fd>* received) {
  check_owner();
  v1::SessionResponse response;
  {
    // One call at a time on the connection: each frame is answered by the next one.
    std::lock_guard lock(attach_mutex_);
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
  return response;
}

bool Client::Impl::daemon_stopped() const {
  return view.header->daemon_state.load(std::memory_order_acquire) ==
         static_cast<uint32_t>(shm::DaemonState::kStopped);
}

bool Client::Impl::daemon_gone() const {
  return daemon_stopped() || !attach_fd || net::peer_closed(attach_fd.get());
}

void Client::Impl::release_stream_waits() {
  std::lock_guard lock(slots_mutex_);
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].in_use) continue;
    stream_flags->release(i, slots_[i].generation);
  }
  // Graph replays wait for their plans' done flags (1): the next ones go on too.
  std::lock_guard plans(plans_mutex_);
  for (uint32_t p = 0; p < plan_slot_used_.size(); ++p)
    if (plan_slot_used_[p]) stream_flags->release(view.ring_depth + p, 1);
}

void Client::Impl::throw_if_daemon_gone() {
  if (!daemon_gone()) return;
  release_stream_waits();
  throw Error(ErrorCode::kDaemonGone, detached
                                          ? "this client has detached"
                                          : "irisd stopped or died; attach again once it is back");
}

void Client::Impl::sleep_for_completions(clock::time_point deadline,
                                         const std::function<bool()>& ready) const {
  // The epoch is read before `ready` is checked: a completion published in between changes it,
  // and the futex then returns at once instead of sleeping through the completion.
  const uint32_t epoch = view.header->completion_epoch.load(std::memory_order_acquire);
  view.header->client_waiters.fetch_add(1, std::memory_order_seq_cst);
  if (!ready()) {
    const auto slice = std::min<clock::duration>(kLivenessInterval, deadline - clock::now());
    shm::futex_wait(view.header->completion_epoch, epoch, slice);
  }
  view.header->client_waiters.fetch_sub(1, std::memory_order_seq_cst);
}

std::optional<ErrorCode> Client::Impl::poll(uint32_t slot, uint32_t generation) const {
  const uint64_t word = view.slots[slot].word.load(std::memory_order_acquire);
  if (!shm::completion_matches(word, generation)) return std::nullopt;
  return shm::completion_code(word);
}

std::string Client::Impl::failure_text(uint32_t slot) const {
  const char* text = view.failures[slot].text;
  return std::string(text, ::strnlen(text, shm::kFailureTextBytes));
}

void Client::Impl::count_rejection() {
  view.header->client_rejections.fetch_add(1, std::memory_order_relaxed);
}

std::optional<ErrorCode> Client::Impl::wait(uint32_t slot, uint32_t generation,
                                            clock::time_point deadline, const Outcome* outcome) {
  check_owner();
  // Taken back while we waited: the slot may already hold another request's completion.
  auto result = [&]() -> std::optional<ErrorCode> {
    if (outcome != nullptr && outcome->ready.load(std::memory_order_acquire)) return outcome->code;
    return poll(slot, generation);
  };
  const auto start = clock::now();
  const auto spin_until = std::min(deadline, start + kSpinBeforeSleep);
  const auto yield_after = start + kPureSpin;
  for (auto now = start; now < spin_until; now = clock::now()) {
    if (auto code = result()) return code;
    // Past the first microseconds, give the core away on each turn: on a busy node the daemon
    // (or a peer rank) may be runnable on this very core, and a pure spin would hold it off
    // until our time slice ends.
    if (now < yield_after) {
      cpu_relax();
    } else {
      sched_yield();
    }
  }
  for (;;) {
    if (auto code = result()) return code;
    throw_if_daemon_gone();
    if (clock::now() >= deadline) return std::nullopt;
    sleep_for_completions(deadline, [&] { return result().has_value(); });
  }
}

uint32_t Client::Impl::acquire_slot(clock::time_point deadline) {
  for (;;) {
    {
      std::lock_guard lock(slots_mutex_);
      if (free_slots_.empty()) {
        // Every slot is held: take back those whose request completed, whether or not its
        // Request has looked yet (it finds the result in its outcome).
        for (uint32_t i = 0; i < slots_.size(); ++i) {
          SlotState& s = slots_[i];
          if (!s.in_use) continue;
          if (auto code = poll(i, s.generation)) take_back_completed(i, *code);
        }
      }
      if (!free_slots_.empty()) {
        const uint32_t slot = free_slots_.back();
        free_slots_.pop_back();
        SlotState& s = slots_[slot];
        s.in_use = true;
        s.abandoned = false;
        s.outcome = std::make_shared<Outcome>();
        s.generation = s.generation + 1 == 0 ? 1 : s.generation + 1;
        return slot;
      }
    }
    throw_if_daemon_gone();
    if (clock::now() >= deadline)
      throw Error(ErrorCode::kBusy,
                  "all " + std::to_string(slots_.size()) +
                      " ring slots hold requests in flight; wait for some, or ask the operator "
                      "for a deeper ring (--ring-depth)");
    sleep_for_completions(deadline, [this] {
      std::lock_guard lock(slots_mutex_);
      for (uint32_t i = 0; i < slots_.size(); ++i)
        if (!slots_[i].in_use || poll(i, slots_[i].generation)) return true;
      return false;
    });
  }
}

void Client::Impl::release_slot(uint32_t slot) {
  std::lock_guard lock(slots_mutex_);
  SlotState& s = slots_[slot];
  s.in_use = false;
  s.outcome.reset();
  free_slots_.push_back(slot);
}

void Client::Impl::take_back_completed(uint32_t slot, ErrorCode code) {
  SlotState& s = slots_[slot];
  if (s.outcome && !s.abandoned) {
    s.outcome->code = code;
    // Read now: the next request in this slot overwrites the text.
    if (code != ErrorCode::kOk) s.outcome->why = failure_text(slot);
    s.outcome->ready.store(true, std::memory_order_release);
  }
  s.outcome.reset();
  s.abandoned = false;
  s.in_use = false;
  free_slots_.push_back(slot);
}

std::pair<ErrorCode, std::string> Client::Impl::collect(uint32_t slot, const Outcome& outcome,
                                                        ErrorCode code) {
  std::lock_guard lock(slots_mutex_);
  if (outcome.ready.load(std::memory_order_acquire)) return {outcome.code, outcome.why};
  std::string why = code != ErrorCode::kOk ? failure_text(slot) : std::string();
  SlotState& s = slots_[slot];
  s.in_use = false;
  s.outcome.reset();
  free_slots_.push_back(slot);
  return {code, std::move(why)};
}

void Client::Impl::abandon(uint32_t slot, const Outcome& outcome) {
  std::lock_guard lock(slots_mutex_);
  // Taken back already (the outcome is ready, the slot may hold another request): nothing to do.
  if (outcome.ready.load(std::memory_order_acquire)) return;
  slots_[slot].abandoned = true;
}

void Client::Impl::ring_doorbell() {
  // Pairs with the daemon's store of daemon_needs_wakeup before its last look at the ring.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (view.header->daemon_needs_wakeup.load(std::memory_order_relaxed) != 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_fd.get(), &one, sizeof(one));
  }
}

void Client::Impl::stage_args(uint32_t slot, std::span<const uint64_t> values,
                              shm::SubmitEntry& entry) {
  const std::size_t need = values.size_bytes();
  std::lock_guard lock(args_mutex_);
  if (args_arenas_.empty() || args_arenas_.back().stride < need) {
    std::size_t stride = 256;
    while (stride < need) stride *= 2;
    auto [id, mapping] = allocate_host(stride * slots_.size(), "allocate argument area");
    args_arenas_.push_back({id, stride, std::move(mapping)});
  }
  ArgsArena& arena = args_arenas_.back();
  const std::size_t offset = std::size_t{slot} * arena.stride;
  std::memcpy(static_cast<std::byte*>(arena.mapping.data()) + offset, values.data(), need);
  entry.args_buffer = arena.buffer_id;
  entry.args_offset = offset;
}

Request Client::Impl::submit(shm::SubmitEntry entry, std::atomic<uint64_t>* seq_counter,
                             std::optional<GpuStream> stream, std::optional<StreamCopy> own_block,
                             std::span<const uint64_t> v_args, HeldRegistrations* held) {
  check_owner();
  // Only the cheap check here: a crashed daemon is noticed by the wait.
  if (detached || daemon_stopped())
    throw Error(ErrorCode::kDaemonGone, detached ? "this client has detached"
                                                 : "irisd stopped; attach again once it is back");
  // Under capture the call becomes a graph plan: no ring slot, no ring entry.
  if (stream && stream_flags->capturing(*stream)) {
    capture_graph_plan(entry, *stream, own_block, v_args);
    if (held != nullptr) held->submitted(std::nullopt);  // the graph replays them
    return Request();
  }
  const auto deadline = deadline_after(options.submit_timeout);
  const uint32_t slot = acquire_slot(deadline);
  const uint32_t generation = slots_[slot].generation;
  entry.slot = slot;
  entry.generation = generation;
  if (!v_args.empty()) {
    try {
      stage_args(slot, v_args, entry);
    } catch (const Error&) {
      release_slot(slot);
      throw;
    }
  }
  if (stream) {
    try {
      if (own_block)
        stream_flags->enqueue_copy(*stream, own_block->dst, own_block->src, own_block->bytes);
      stream_flags->enqueue_ready(*stream, slot, generation);
    } catch (const Error&) {
      release_slot(slot);
      throw;
    }
  }
  {
    std::lock_guard lock(submit_mutex_);
    if (seq_counter != nullptr) entry.seq = seq_counter->load(std::memory_order_relaxed);
    // Slots bound the requests in flight to the ring depth, so the ring has room unless the
    // daemon is slow to pop; then this waits, never overwrites.
    while (!producer_.try_push(entry)) {
      if (daemon_gone() || clock::now() >= deadline) {
        release_slot(slot);
        throw_if_daemon_gone();
        throw Error(ErrorCode::kBusy, "submission ring full: irisd is not keeping up");
      }
      std::this_thread::yield();
    }
    if (seq_counter != nullptr) seq_counter->fetch_add(1, std::memory_order_relaxed);
  }
  if (held != nullptr) held->submitted(GpuRegistrationCache::Use{slot, generation});
  ring_doorbell();
  // After the push: the request is in flight whatever happens here, and a failure to enqueue
  // the wait is reported while the Request still tracks the slot.
  Request request(
      std::make_shared<Request::Impl>(shared_from_this(), slot, generation, slots_[slot].outcome));
  if (stream) stream_flags->enqueue_wait_done(*stream, slot, generation);
  return request;
}

void Client::Impl::capture_graph_plan(shm::SubmitEntry entry, GpuStream stream,
                                      std::optional<StreamCopy> own_block,
                                      std::span<const uint64_t> v_args) {
  stream_flags->check_capture_supported(stream);  // before irisd holds anything
  uint32_t plan_slot = 0;
  {
    std::lock_guard lock(plans_mutex_);
    while (plan_slot < plan_slot_used_.size() && plan_slot_used_[plan_slot]) ++plan_slot;
    if (plan_slot == plan_slot_used_.size())
      throw Error(ErrorCode::kLimitExceeded,
                  "this client already holds " + std::to_string(shm::kGraphPlanSlots) +
                      " collectives captured in CUDA graphs; destroy some graphs first");
    plan_slot_used_[plan_slot] = true;
  }
  auto free_plan_slot = [&] {
    std::lock_guard lock(plans_mutex_);
    plan_slot_used_[plan_slot] = false;
  };
  try {
    entry.slot = 0;
    entry.generation = 0;
    entry.seq = 0;
    // All-to-all-v's counts: staged in a ring slot's area for irisd to read while it registers
    // the plan (it keeps a copy), then the slot is free again.
    std::optional<uint32_t> staging;
    if (!v_args.empty()) {
      staging = acquire_slot(deadline_after(options.submit_timeout));
      try {
        stage_args(*staging, v_args, entry);
      } catch (const Error&) {
        release_slot(*staging);
        throw;
      }
    }
    v1::SessionRequest request;
    request.mutable_register_plan()->set_entry(
        std::string(reinterpret_cast<const char*>(&entry), sizeof(entry)));
    request.mutable_register_plan()->set_plan_slot(plan_slot);
    try {
      session_call(request, "capture a collective into a CUDA graph");
    } catch (const Error&) {
      if (staging) release_slot(*staging);
      throw;
    }
    if (staging) release_slot(*staging);
  } catch (const Error&) {
    free_plan_slot();
    throw;
  }
  // From here irisd holds the plan: whatever fails, the graph's release (or this) frees it.
  try {
    if (own_block)
      stream_flags->enqueue_copy(stream, own_block->dst, own_block->src, own_block->bytes);
    stream_flags->enqueue_graph_plan(stream, view.ring_depth + plan_slot);
    std::weak_ptr<Impl> self = weak_from_this();
    stream_flags->on_graph_destroyed(stream, [self, plan_slot] {
      if (auto impl = self.lock()) impl->release_graph_plan(plan_slot);
    });
  } catch (const Error&) {
    release_graph_plan(plan_slot);
    throw;
  }
}

void Client::Impl::release_graph_plan(uint32_t plan_slot) {
  v1::SessionRequest request;
  request.mutable_release_plan()->set_plan_slot(plan_slot);
  try {
    if (!detached && !daemon_gone()) session_call(request, "release a CUDA graph's collective");
  } catch (const Error&) {
    // The session is ending or irisd is gone: the plan goes with the session.
  }
  // irisd no longer writes the slot: a failure of its last replay stays reported by
  // check_graphs although the graph is gone (it is often destroyed right after its stream's
  // synchronize, before the host looks).
  std::optional<Error> failed = plan_failure(plan_slot);
  std::lock_guard lock(plans_mutex_);
  if (failed && !released_failure_) released_failure_ = std::move(failed);
  plan_slot_used_[plan_slot] = false;
}

std::optional<Error> Client::Impl::plan_failure(uint32_t plan_slot) const {
  const uint32_t index = view.ring_depth + plan_slot;
  const uint64_t word = view.slots[index].word.load(std::memory_order_acquire);
  const ErrorCode code = shm::completion_code(word);
  if ((word & 1u) == 0 || code == ErrorCode::kOk) return std::nullopt;  // none yet, or it went well
  const std::string why = failure_text(index);
  return Error(code, "a collective captured into a CUDA graph failed in replay " +
                         std::to_string(static_cast<uint32_t>(word >> 32)) + ": " +
                         (why.empty() ? describe_failure(code) : why));
}

void Client::Impl::check_graphs() {
  std::vector<uint32_t> held;
  {
    std::lock_guard lock(plans_mutex_);
    if (released_failure_) {
      // Reported once: the graph that failed is gone.
      const Error failed = *released_failure_;
      released_failure_.reset();
      throw failed;
    }
    for (uint32_t p = 0; p < plan_slot_used_.size(); ++p)
      if (plan_slot_used_[p]) held.push_back(p);
  }
  for (uint32_t p : held)
    if (auto failed = plan_failure(p)) throw *failed;
}

std::pair<uint64_t, shm::ShmSegment> Client::Impl::allocate_host(std::size_t bytes,
                                                                 const char* what) {
  v1::SessionRequest request;
  request.mutable_allocate_host()->set_bytes(bytes);
  std::vector<net::Fd> fds;
  const auto response = session_call(request, what, {}, &fds);
  if (fds.size() != 1)
    throw Error(ErrorCode::kProtocolMismatch,
                std::string(what) + ": no memory came with the answer");
  try {
    return {response.registered().buffer_id(), shm::ShmSegment::map(std::move(fds[0]))};
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kProtocolMismatch, e.what());
  }
}

Buffer Client::Impl::allocate(std::size_t bytes) {
  auto [id, segment] = allocate_host(bytes, "allocate");
  auto mapping = std::make_shared<shm::ShmSegment>(std::move(segment));
  void* base = mapping->data();
  return add_buffer(id, base, bytes, std::move(mapping), false);
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
  v1::SessionRequest request;
  request.mutable_allocate_host()->set_bytes(size);
  std::vector<net::Fd> fds;
  const auto response = session_call(request, "register host memory", {}, &fds);
  const uint64_t id = response.registered().buffer_id();
  auto give_back = [&] {
    v1::SessionRequest deregister;
    deregister.mutable_deregister()->set_buffer_id(id);
    session_call(deregister, "register host memory (undo)");
  };
  if (fds.size() != 1) {
    give_back();
    throw Error(ErrorCode::kProtocolMismatch,
                "register host memory: no memory came with the answer");
  }
  // The contents go into irisd's memory first; then that memory replaces the pages at the same
  // addresses (MAP_FIXED swaps them in one step, so no other thread sees a hole).
  if (::pwrite(fds[0].get(), ptr, size, 0) != static_cast<ssize_t>(size) ||
      ::mmap(ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fds[0].get(), 0) ==
          MAP_FAILED) {
    const std::string reason = std::strerror(errno);
    give_back();
    throw Error(ErrorCode::kInvalidArgument, "register host memory: " + reason);
  }
  return add_buffer(id, ptr, size, nullptr, false);
}

uint64_t Client::Impl::register_gpu(GpuRuntime& runtime, GpuVendor vendor, void* device_ptr,
                                    std::size_t bytes) {
  ExportedGpuBuffer exported = export_gpu_buffer(runtime, device_ptr, bytes);
  v1::SessionRequest request;
  std::vector<int> fds;
  if (exported.ipc) {
    *request.mutable_register_ipc() = register_request(vendor, *exported.ipc);
  } else {
    *request.mutable_register_vmm() = exported.vmm;
    for (const net::Fd& fd : exported.fds) fds.push_back(fd.get());
  }
  return session_call(request, "register GPU buffer", fds).registered().buffer_id();
}

Buffer Client::Impl::register_gpu_buffer(GpuVendor vendor, void* device_ptr, std::size_t bytes) {
  const std::unique_ptr<GpuRuntime> runtime = make_gpu_runtime(vendor);
  const uint64_t id = register_gpu(*runtime, vendor, device_ptr, bytes);
  return add_buffer(id, device_ptr, bytes, nullptr, true);
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

uint64_t Client::Impl::register_range(void* base, std::size_t bytes) {
  return register_gpu(*gpu_cache_runtime_, GpuVendor::kCuda, base, bytes);
}

void Client::Impl::deregister(uint64_t buffer_id) {
  if (detached || daemon_gone()) return;
  v1::SessionRequest request;
  request.mutable_deregister()->set_buffer_id(buffer_id);
  session_call(request, "free buffer");
}

bool Client::Impl::finished(uint32_t slot, uint32_t generation) const {
  if (poll(slot, generation)) return true;
  std::lock_guard lock(slots_mutex_);
  return slots_[slot].generation != generation || !slots_[slot].in_use;
}

Buffer Client::Impl::add_buffer(uint64_t id, void* base, std::size_t bytes,
                                std::shared_ptr<shm::ShmSegment> mapping, bool gpu) {
  {
    std::lock_guard lock(buffers_mutex_);
    buffers_[reinterpret_cast<uintptr_t>(base)] = {id, bytes, gpu};
  }
  return Buffer(
      std::make_shared<Buffer::Impl>(shared_from_this(), id, base, bytes, std::move(mapping)));
}

void Client::Impl::forget_buffer(uint64_t id, void* base) {
  {
    std::lock_guard lock(buffers_mutex_);
    buffers_.erase(reinterpret_cast<uintptr_t>(base));
  }
  try {
    deregister(id);
  } catch (const Error&) {
    // The session's end frees it anyway.
  }
}

std::optional<BufferLocation> Client::Impl::locate(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(buffers_mutex_);
  auto it = buffers_.upper_bound(p);
  if (it == buffers_.begin()) return std::nullopt;
  --it;
  const uintptr_t base = it->first;
  if (p - base > it->second.bytes) return std::nullopt;  // one past the end is a 0-byte range
  return BufferLocation{it->second.id, p - base, it->second.bytes - (p - base), it->second.gpu};
}

}  // namespace iris
