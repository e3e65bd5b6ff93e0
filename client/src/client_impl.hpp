// libiris internals: the session (attach connection, segment, ring producer, completion slots,
// registered buffers). Shared by Client, Communicator, Buffer and Request through shared_ptr,
// so a Request outliving its Client still finds the segment mapped.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/gpu/gpu_registration_cache.hpp"
#include "client/gpu/stream_flags.hpp"
#include "client/src/daemon_watch.hpp"
#include "iris/buffer.hpp"
#include "iris/client.hpp"
#include "iris/error.hpp"
#include "iris/request.hpp"
#include "iris/shared/descriptor.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/shm_segment.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris {

// Where a pointer lies inside a registered buffer.
struct BufferLocation {
  uint64_t buffer_id;
  uint64_t offset;
  uint64_t available;  // bytes from the pointer to the buffer's end
  bool gpu;            // memory of the caller's GPU (not a buffer from allocate)
};

// A communicator rank as libiris submits for it: shared by its Communicator and the session, which
// rejoins it when irisd restarts (irisd then gives it a new id).
// The channel of a send or receive entry, as CommRank::p2p_posted keys it: (a send, its peer).
inline std::pair<bool, uint32_t> p2p_channel(const shm::SubmitEntry& e) {
  return {e.opcode == static_cast<uint32_t>(shm::Opcode::kSend), e.root};
}

struct CommRank {
  std::string key;
  uint32_t nranks = 0;
  uint32_t rank = 0;
  std::atomic<uint64_t> id{0};
  std::atomic<uint64_t> next_seq{1};  // the next collective's sequence number
  // Sends (true) and receives (false) posted so far, by peer: each one's position in its
  // channel, which a resume tells irisd about (under Client::Impl::submit_mutex_).
  std::map<std::pair<bool, uint32_t>, uint64_t> p2p_posted;
  // A communicator across nodes: its layout as the job passed it, passed again on resuming.
  std::vector<std::string> node_addresses;
  std::vector<uint32_t> node_of_rank;
  std::string secret;
  uint64_t op_timeout_ms = 0;  // CommOptions::op_timeout, passed again on resuming
  // What irisd gave the communicator at creation: a resume presents it (under comms_mutex_).
  std::string resume_secret;
  std::atomic<bool> destroyed{false};
  // The irisd that gave `id` (Client::Impl::connection_'s count); both change together, under
  // Client::Impl::comms_mutex_, when a resume carries the communicator to the next irisd.
  uint64_t connection = 0;
};

struct Client::Impl : std::enable_shared_from_this<Client::Impl>, GpuRegistrationCache::Session {
  Impl(const ClientOptions& options);
  ~Impl() override;

  // A request's result once its completion slot went back to the pool before its Request looked
  // (acquire_slot takes back completed slots when none is free, so that Requests kept unwaited
  // never block later calls); held by the Request's state, written through the slot's.
  struct Outcome {
    std::atomic<bool> ready{false};  // release: code and why are set
    ErrorCode code = ErrorCode::kOk;
    std::string why;
  };

  // Submits one entry; `comm`, when given, supplies entry.comm_id (and with `sequenced`,
  // entry.seq) under the submission lock, so that a communicator's sequence numbers enter the
  // ring in order and a resumed session's new communicator ids are used. With a `stream`, the
  // request is ordered on it: ready flag written by the stream, the stream waits for done.
  // `own_block`, with a stream: a copy the stream runs before the ready flag (see
  // shm::kOwnBlockCopiedByClient). `v_args`, when not empty, are staged where irisd reads
  // them (all-to-all-v's counts and displacements) and named in the entry.
  struct StreamCopy {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  // `held`: registrations made on first use that the entry names, kept while it is in flight.
  Request submit(shm::SubmitEntry entry, CommRank* comm, bool sequenced,
                 std::optional<GpuStream> stream = std::nullopt,
                 std::optional<StreamCopy> own_block = std::nullopt,
                 std::span<const uint64_t> v_args = {}, HeldRegistrations* held = nullptr);
  // A stream-ordered collective on a capturing stream: registered with irisd as a graph plan
  // (once), and only the plan's stream memory operations go into the graph. The plan goes when
  // the graph is destroyed. Throws iris::Error at capture time for anything irisd refuses.
  void capture_graph_plan(shm::SubmitEntry entry, CommRank& comm, GpuStream stream,
                          std::optional<StreamCopy> own_block, std::span<const uint64_t> v_args);
  // Throws the failure of a graph plan's last replay (Client::check_graphs).
  void check_graphs();
  // Waits for a slot's completion until `deadline`, or until `outcome` is ready (its slot was
  // taken back); nullopt on timeout. Throws kDaemonGone.
  std::optional<ErrorCode> wait(uint32_t slot, uint32_t generation,
                                std::chrono::steady_clock::time_point deadline,
                                const Outcome* outcome = nullptr);
  std::optional<ErrorCode> poll(uint32_t slot, uint32_t generation) const;
  // The daemon's reason for the failure completed in `slot` (empty when it gave none).
  std::string failure_text(uint32_t slot) const;
  // Counts a request libiris refused before it reached irisd (shown by `iris-ctl sessions`).
  void count_rejection();
  // A slot whose request never reached the ring (or only staged arguments) back to the pool.
  void release_slot(uint32_t slot);
  // The Request saw `code` in its slot (or found its outcome ready): its result, and the slot
  // back in the pool unless acquire_slot already took it.
  std::pair<ErrorCode, std::string> collect(uint32_t slot, const Outcome& outcome, ErrorCode code);
  // The Request went away before its completion: the slot is taken back once it completes
  // (unless it was already).
  void abandon(uint32_t slot, const Outcome& outcome);

  // Joins communicator `key` (comm_init), kept for resuming the session; throws iris::Error.
  std::shared_ptr<CommRank> join(v1::SessionRequest& request, const std::string& key,
                                 uint32_t nranks, uint32_t rank);

  Buffer allocate(std::size_t bytes);
  // Moves the pages of [ptr, ptr + bytes) onto memory irisd allocated (see Client::register_host).
  Buffer register_host(void* ptr, std::size_t bytes);
  // Registers GPU memory of this process through the vendor's runtime (IPC handle or VMM fds).
  Buffer register_gpu_buffer(GpuVendor vendor, void* device_ptr, std::size_t bytes);
  // GPU memory the caller did not register, registered on first use (GpuRegistrationCache);
  // null when this session cannot (the engine takes no CUDA memory, no driver, turned off).
  GpuRegistrationCache* gpu_cache();
  // The cache if a lookup made it already, else null (never makes it).
  GpuRegistrationCache* existing_gpu_cache();
  // GpuRegistrationCache::Session.
  Registration register_range(void* base, std::size_t bytes) override;
  // A resume switches the connection before it reads what the session registered (buffers,
  // areas, communicators, GPU ranges), each table under its lock. Asked under that lock, true
  // means the resume to come will carry the registration; false means its irisd is gone and the
  // resume may have carried the table without it, so the caller registers again (nothing to
  // undo: what that irisd made went with it).
  bool answered_by_current_irisd(uint64_t connection) const override {
    return connection == connection_.load(std::memory_order_acquire);
  }
  // A session call whose result goes into one of the session's tables: made again until the
  // irisd that answered it is still the one attached once `table`'s lock is held (see above).
  // `call()` makes it and returns the connection it was answered on; `record(connection)` runs
  // under `table` and returns the result.
  template <typename Call, typename Record>
  auto call_and_record(std::mutex& table, Call&& call, Record&& record) {
    for (;;) {
      const uint64_t connection = call();
      std::lock_guard lock(table);
      if (answered_by_current_irisd(connection)) return record(connection);
    }
  }
  uint64_t current_connection() const override {
    return connection_.load(std::memory_order_acquire);
  }
  // Frees `buffer_id` on the irisd of `connection` (current_connection(), read under the lock of
  // the table the id just left): a later irisd never knew it, or knows it as another buffer.
  void deregister(uint64_t buffer_id, uint64_t connection) override;
  bool finished(uint32_t slot, uint32_t generation) const override;
  void forget_buffer(uint64_t id, void* base);
  // Records a registered range for locate(); `mapping` is null for memory the caller owns,
  // `gpu` true for the caller's GPU memory (of `vendor`). `memfd`: host memory irisd allocated,
  // kept to hand to the next irisd if this one restarts.
  // `connection`: the one irisd answered the registration on. Nullopt, recording nothing, when
  // that irisd has gone since (answered_by_current_irisd): register again. `map_in` runs under
  // the table's lock once the answer counts, before the range is recorded.
  std::optional<Buffer> add_buffer(uint64_t id, uint64_t connection, void* base, std::size_t bytes,
                                   std::shared_ptr<shm::ShmSegment> mapping, bool gpu,
                                   std::shared_ptr<const net::Fd> memfd = nullptr,
                                   GpuVendor vendor = GpuVendor::kCuda,
                                   const std::function<void()>& map_in = {});
  // Finds the registered buffer holding each pointer (nullopt where none does, or the pointer is
  // null): a collective's two sides under one lock.
  std::array<std::optional<BufferLocation>, 2> locate(std::array<const void*, 2> ptrs) const;

  // One call of this session on the attach connection, with `fds` beside it; the descriptors
  // that came with the answer go to `received`, the connection it came on to `connection`.
  // Throws the answer's error, or kDaemonGone.
  v1::SessionResponse session_call(const v1::SessionRequest& request, const char* what,
                                   const std::vector<int>& fds = {},
                                   std::vector<net::Fd>* received = nullptr,
                                   uint64_t* connection = nullptr);
  // A session call naming `comm` by its id, which each irisd gives anew: `name` writes the id into
  // the request. Sent only to the irisd the id is from, and again to the next irisd once a resume
  // carried the communicator there; never to one that does not know it (an old id may name
  // another communicator there). Nullopt when the communicator, destroyed, was carried nowhere.
  // `connection`: where it was answered.
  std::optional<v1::SessionResponse> call_naming(
      CommRank& comm, const std::function<void(v1::SessionRequest&, uint64_t id)>& name,
      const char* what, uint64_t* connection = nullptr);
  // Marks `comm` destroyed (a resume from now on leaves it behind) and destroys it on the irisd
  // holding it, if any.
  void destroy(CommRank& comm);
  // Host memory irisd allocates for this session.
  struct HostAllocation {
    uint64_t id;
    shm::ShmSegment segment;
    uint64_t connection;  // as session_call's
  };
  HostAllocation allocate_host(std::size_t bytes, const char* what);

  void detach();
  // Throws kInvalidArgument in a process other than the one that attached (a forked child):
  // the ring has one producer, and the session's connection is the parent's.
  void check_owner() const;
  // True once irisd marked the segment stopped (a shared-memory load, no syscall).
  bool daemon_stopped() const;
  // True once irisd is gone for good: it closed the session, or did not come back within the
  // resume window (at once with a window of 0). While the session resumes it is false: calls
  // wait (test() reports not done).
  bool daemon_gone() const;
  // Throws kDaemonGone once irisd is known to be gone (two loads: for paths that poll, such
  // as Request::test, which must notice without a syscall per call).
  void check_daemon();

  ClientOptions options;
  // How long this client waits for irisd to come back (ClientOptions, else $IRIS_RESUME_WINDOW_MS,
  // else irisd's --resume-window-ms).
  std::chrono::milliseconds resume_window{0};
  std::chrono::microseconds wait_spin{50};  // ClientOptions::wait_spin, resolved
  net::Fd attach_fd;
  net::Fd wake_fd;
  shm::ShmSegment segment;
  shm::SegmentView view;
  std::atomic<uint64_t> session_id{0};  // a resumed session gets a new one
  pid_t owner_pid = 0;                  // the process that attached
  std::string engine;
  std::string daemon_version;
  bool detached = false;
  std::unique_ptr<StreamFlagsMapping> stream_flags;

 private:
  // The session after irisd went away (session_resume.cpp). Runs on the daemon watch's thread:
  // attaches again within the resume window and brings back the buffers, communicators, graph
  // plans and unfinished requests. Returns the new connection to watch, or -1 when irisd is gone
  // for good (then `gone_why_` says why).
  int reattach(DaemonWatch& watch);
  // The parts of reattach.
  std::map<uint64_t, uint64_t> resume_comms();
  // Stream-ordered requests whose done flag the previous irisd wrote: completed (not re-run).
  void settle_stream_completions();
  void resume_buffers();
  void resume_graph_plans(const std::map<uint64_t, uint64_t>& comm_ids);
  void resubmit(const std::map<uint64_t, uint64_t>& comm_ids);
  // What a resuming communicator tells irisd of its sends' and receives' progress.
  void add_p2p_progress(const CommRank& comm, v1::CommInitRequest& init);
  // A call on the attach connection without waiting for a resume (the resume's own calls).
  v1::SessionResponse call(const v1::SessionRequest& request, const char* what,
                           const std::vector<int>& fds, std::vector<net::Fd>* received,
                           uint64_t* connection = nullptr);
  // call() and call_on(): `only_on` set, nullopt when attach_fd leads to another irisd.
  std::optional<v1::SessionResponse> exchange(const v1::SessionRequest& request, const char* what,
                                              const std::vector<int>& fds,
                                              std::vector<net::Fd>* received, uint64_t* connection,
                                              std::optional<uint64_t> only_on);
  // The same on the irisd of `connection` alone: nullopt, sending nothing, once attach_fd leads
  // to another.
  std::optional<v1::SessionResponse> call_on(uint64_t connection, const v1::SessionRequest& request,
                                             const char* what, const std::vector<int>& fds = {});
  // After a call on `connection` broke (kDaemonGone): waits, until `deadline`, for the watch to
  // see the hang-up and the session to resume; true when it resumed with another irisd.
  bool resumed_since(uint64_t connection, std::chrono::steady_clock::time_point deadline);
  // Waits while the session resumes, until `deadline`.
  void wait_while_resuming(std::chrono::steady_clock::time_point deadline) const;
  bool resuming() const { return link_.load(std::memory_order_acquire) == Link::kResuming; }
  enum class Link { kUp, kResuming, kGone };
  std::atomic<Link> link_{Link::kUp};
  // Which irisd attach_fd leads to: advanced under attach_mutex_ as a resume switches it.
  std::atomic<uint64_t> connection_{0};
  uint64_t connection_left_ = 0;  // the irisd a resume in progress left (the watch's thread)
  mutable std::mutex link_mutex_;
  mutable std::condition_variable link_changed_;
  std::string gone_why_;  // set before link_ becomes kGone
  // The release of the irisd this session is attached to now (daemon_version is the first's);
  // the daemon watch's thread alone uses it.
  std::string latest_daemon_version_;
  std::mutex comms_mutex_;
  std::vector<std::weak_ptr<CommRank>> comms_;

  // A free completion slot for a request whose result `outcome` receives if the slot is taken
  // back before the request looks (null: a slot that only stages arguments).
  uint32_t acquire_slot(std::chrono::steady_clock::time_point deadline, Outcome* outcome);
  void ring_doorbell();
  void throw_if_daemon_gone();
  // Lets GPU streams waiting on this session's done flags go on (the daemon will not write them).
  void release_stream_waits();
  // The part of it for CUDA graphs' replays.
  void release_graph_waits();
  // Sleeps until the daemon publishes completions, `deadline`, or a liveness check is due;
  // returns at once if `ready` already holds.
  void sleep_for_completions(std::chrono::steady_clock::time_point deadline,
                             const std::function<bool()>& ready) const;

  // The plan's graph was destroyed: tell irisd and free its slot. Runs on a GPU runtime thread.
  void release_graph_plan(uint32_t plan_slot);
  // The failure of a plan slot's last replay, if it failed.
  std::optional<Error> plan_failure(uint32_t plan_slot) const;

  struct SlotState {
    uint32_t generation = 0;
    bool in_use = false;
    // Its Request's, while the request is in flight; null once the Request went away before the
    // completion arrived (abandon).
    Outcome* outcome = nullptr;
    // Set under submit_mutex_ just before its entry goes into the ring (once there, it may
    // complete and its slot be taken back before the submitting thread runs again), and read
    // only under it: the entry as pushed, and its place in the order of pushes, to submit it
    // again if irisd restarts before it completes.
    bool queued = false;
    uint64_t ticket = 0;
    shm::SubmitEntry entry{};
  };
  uint64_t next_ticket_ = 0;  // under submit_mutex_
  // With slots_mutex_ held: a completed slot back to the pool, its result kept in its outcome.
  void take_back_completed(uint32_t slot, ErrorCode code);

  std::mutex submit_mutex_;  // process-local: the ring has one producer per session
  shm::RingProducer<shm::SubmitEntry> producer_;
  mutable std::mutex slots_mutex_;
  std::vector<SlotState> slots_;
  std::vector<uint32_t> free_slots_;
  mutable std::mutex plans_mutex_;
  std::vector<bool> plan_slot_used_ = std::vector<bool>(shm::kGraphPlanSlots);
  // Each plan's entry as registered, and its place in the order of registrations (irisd matches
  // plans across ranks in that order), to register it again if irisd restarts.
  struct PlanRecord {
    shm::SubmitEntry entry{};
    uint64_t order = 0;
    std::vector<uint64_t> v_args;
    // Why the irisd that came back after a restart refused it (memory it names was freed since
    // the capture, say): its replays are released by the watch and check_graphs() reports it.
    std::optional<Error> lost;
  };
  // Stores the done flag of each lost plan (its replay resets it and waits again).
  void release_lost_plans();
  // Registers a plan with irisd: resuming, on the resume's connection (`comm` null, the entry's
  // id already the next irisd's); else naming `comm` by the id of the irisd it goes to, written
  // into `entry`. Returns the connection it was answered on.
  uint64_t send_plan(uint32_t plan_slot, shm::SubmitEntry& entry, std::span<const uint64_t> v_args,
                     CommRank* comm);
  std::vector<PlanRecord> plan_records_ = std::vector<PlanRecord>(shm::kGraphPlanSlots);
  uint64_t next_plan_order_ = 1;           // 0: a slot not (yet) registered
  std::optional<Error> released_failure_;  // of a plan released since check_graphs last looked
  // Above every buffer id irisd has given this session (ResumeSession.next_buffer_id).
  std::atomic<uint64_t> next_buffer_id_{1};

  // Copies `values` into the argument area of `slot` and names it in `entry`. One area per
  // completion slot, so a request's arguments stay put until it completes (irisd copies them
  // out when it pops the entry); areas grow (new buffer) when a larger communicator needs more.
  void stage_args(uint32_t slot, std::span<const uint64_t> values, shm::SubmitEntry& entry);
  struct ArgsArena {
    uint64_t buffer_id;
    std::size_t stride;  // bytes per slot
    shm::ShmSegment mapping;
  };
  std::mutex args_mutex_;
  // The last is current; earlier ones stay mapped for requests that may still name them (at
  // most one per doubling of the stride).
  std::vector<ArgsArena> args_arenas_;

  struct Registered {
    uint64_t id;
    std::size_t bytes;
    bool gpu;
    GpuVendor vendor;
    std::shared_ptr<const net::Fd> memfd;  // host memory irisd allocated
  };
  // Buffer ids irisd gave for GPU memory of this process (IPC handle or VMM fds); `resume_id`:
  // the id to register it under again after a restart.
  // `connection`: as session_call's.
  uint64_t register_gpu(GpuRuntime& runtime, GpuVendor vendor, void* device_ptr, std::size_t bytes,
                        uint64_t resume_id = 0, uint64_t* connection = nullptr);

  std::mutex gpu_cache_mutex_;  // creating the cache
  bool gpu_cache_tried_ = false;
  std::unique_ptr<GpuRuntime> gpu_cache_runtime_;
  std::unique_ptr<GpuRegistrationCache> gpu_cache_;

  // The stream done flags' registration, once made (StreamFlagsMapping sets them up).
  std::mutex done_flags_mutex_;
  std::optional<v1::SessionRequest> done_flags_registration_;

  mutable std::mutex buffers_mutex_;
  std::mutex attach_mutex_;                  // one session request at a time on attach_fd
  std::map<uintptr_t, Registered> buffers_;  // by base address
  // Last: it stops (its callback touching the members above) before they go.
  std::unique_ptr<DaemonWatch> watch_;
};

// Now + `timeout`, saturating (a timeout of nanoseconds::max() waits for ever).
std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds timeout);

}  // namespace iris
