// libiris internals: the session (attach connection, segment, ring producer, completion slots,
// registered buffers). Shared by Client, Communicator, Buffer and Request through shared_ptr,
// so a Request outliving its Client still finds the segment mapped.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
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

struct Client::Impl : std::enable_shared_from_this<Client::Impl>, GpuRegistrationCache::Session {
  Impl(const ClientOptions& options);
  ~Impl() override;

  // A request's result once its completion slot went back to the pool before its Request looked
  // (acquire_slot takes back completed slots when none is free, so that Requests kept unwaited
  // never block later calls); shared by the slot's state and the Request.
  struct Outcome {
    std::atomic<bool> ready{false};  // release: code and why are set
    ErrorCode code = ErrorCode::kOk;
    std::string why;
  };

  // Submits one entry; `seq_counter`, when given, supplies entry.seq under the submission lock
  // so that a communicator's sequence numbers enter the ring in order. With a `stream`, the
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
  Request submit(shm::SubmitEntry entry, std::atomic<uint64_t>* seq_counter,
                 std::optional<GpuStream> stream = std::nullopt,
                 std::optional<StreamCopy> own_block = std::nullopt,
                 std::span<const uint64_t> v_args = {}, HeldRegistrations* held = nullptr);
  // A stream-ordered collective on a capturing stream: registered with irisd as a graph plan
  // (once), and only the plan's stream memory operations go into the graph. The plan goes when
  // the graph is destroyed. Throws iris::Error at capture time for anything irisd refuses.
  void capture_graph_plan(shm::SubmitEntry entry, GpuStream stream,
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
  uint64_t register_range(void* base, std::size_t bytes) override;
  void deregister(uint64_t buffer_id) override;
  bool finished(uint32_t slot, uint32_t generation) const override;
  void forget_buffer(uint64_t id, void* base);
  // Records a registered range for locate(); `mapping` is null for memory the caller owns,
  // `gpu` true for the caller's GPU memory.
  Buffer add_buffer(uint64_t id, void* base, std::size_t bytes,
                    std::shared_ptr<shm::ShmSegment> mapping, bool gpu);
  // Finds the registered buffer holding `ptr`; nullopt when none does.
  std::optional<BufferLocation> locate(const void* ptr) const;

  // One call of this session on the attach connection, with `fds` beside it; the descriptors
  // that came with the answer go to `received`. Throws the answer's error, or kDaemonGone.
  v1::SessionResponse session_call(const v1::SessionRequest& request, const char* what,
                                   const std::vector<int>& fds = {},
                                   std::vector<net::Fd>* received = nullptr);
  // Host memory irisd allocates for this session: its buffer id and the mapped segment.
  std::pair<uint64_t, shm::ShmSegment> allocate_host(std::size_t bytes, const char* what);

  void detach();
  // Throws kInvalidArgument in a process other than the one that attached (a forked child):
  // the ring has one producer, and the session's connection is the parent's.
  void check_owner() const;
  // True once irisd marked the segment stopped (a shared-memory load, no syscall).
  bool daemon_stopped() const;
  // Also true when the attach connection closed (irisd died, or ended the session).
  bool daemon_gone() const;
  // Throws kDaemonGone once irisd is known to be gone (two loads: for paths that poll, such
  // as Request::test, which must notice without a syscall per call).
  void check_daemon();

  ClientOptions options;
  net::Fd attach_fd;
  net::Fd wake_fd;
  shm::ShmSegment segment;
  shm::SegmentView view;
  uint64_t session_id = 0;
  pid_t owner_pid = 0;  // the process that attached
  std::string engine;
  std::string daemon_version;
  bool detached = false;
  std::unique_ptr<StreamFlagsMapping> stream_flags;

 private:
  uint32_t acquire_slot(std::chrono::steady_clock::time_point deadline);
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
    bool abandoned = false;            // its Request went away before the completion arrived
    std::shared_ptr<Outcome> outcome;  // its Request's, while the request is in flight
  };
  // With slots_mutex_ held: a completed slot back to the pool, its result kept in its outcome.
  void take_back_completed(uint32_t slot, ErrorCode code);

  std::mutex submit_mutex_;  // process-local: the ring has one producer per session
  shm::RingProducer<shm::SubmitEntry> producer_;
  mutable std::mutex slots_mutex_;
  std::vector<SlotState> slots_;
  std::vector<uint32_t> free_slots_;
  std::mutex plans_mutex_;
  std::vector<bool> plan_slot_used_ = std::vector<bool>(shm::kGraphPlanSlots);
  std::optional<Error> released_failure_;  // of a plan released since check_graphs last looked

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
  };
  // Buffer ids irisd gave for GPU memory of this process (IPC handle or VMM fds).
  uint64_t register_gpu(GpuRuntime& runtime, GpuVendor vendor, void* device_ptr, std::size_t bytes);

  std::mutex gpu_cache_mutex_;  // creating the cache
  bool gpu_cache_tried_ = false;
  std::unique_ptr<GpuRuntime> gpu_cache_runtime_;
  std::unique_ptr<GpuRegistrationCache> gpu_cache_;

  mutable std::mutex buffers_mutex_;
  std::mutex attach_mutex_;                  // one session request at a time on attach_fd
  std::map<uintptr_t, Registered> buffers_;  // by base address
  // Last: it stops (its callback touching the members above) before they go.
  std::unique_ptr<DaemonWatch> watch_;
};

// Now + `timeout`, saturating (a timeout of nanoseconds::max() waits for ever).
std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds timeout);

// GPU memory [begin, end) is about to be freed: every session of this process drops its
// first-use registrations of it (PyTorch's pool allocator, iris_torch_free).
void forget_freed_gpu_memory(uintptr_t begin, uintptr_t end);

}  // namespace iris
