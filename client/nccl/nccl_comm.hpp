// A communicator of the NCCL API (ncclComm_t): one rank of an irisd communicator, held by one of
// the process's sessions (a lane), with what NCCL's API keeps per communicator besides: its
// device, its asynchronous error, the requests its stream-ordered operations left in flight, its
// scratch memory, the reductions made for it (ncclRedOpCreatePreMulSum) and how many
// communicators were made from it (so that every rank names a split's the same).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/nccl/element_types.hpp"
#include "client/nccl/include/nccl.h"
#include "client/nccl/operation_plan.hpp"
#include "client/nccl/process_clients.hpp"
#include "iris/communicator.hpp"

namespace iris::nccl {

// Host memory shared with irisd that operations use for what irisd gathers before a reduction
// and for staging host memory irisd cannot see; grows to the largest need and stays.
class HostScratch {
 public:
  char* reserve(Client& client, std::size_t bytes);

 private:
  Buffer buffer_;
};

// GPU scratch memory and the legacy-stream bridge (stream_operation.cpp).
struct GpuScratch;

// What a communicator's operations of one kind moved on this rank: the bytes irisd's engines wrote
// into its memory, and the bytes written by the local steps (reduction kernels and copies on the
// GPU's SMs, or the host).
struct OpTally {
  uint64_t calls = 0;
  uint64_t by_irisd = 0;
  uint64_t on_gpu = 0;
  uint64_t on_host = 0;
  uint64_t by_fallback = 0;  // written by the fallback NCCL (IRISD_NCCL_FALLBACK)
};

struct CustomReduction {
  ElementType type;
  Reduction reduction;
};

}  // namespace iris::nccl

struct ncclComm;
namespace iris::nccl {
class CommCall;
class CommRef;
// Throws ncclInvalidArgument for a NULL communicator.
void check_comm(const ncclComm* comm);
}  // namespace iris::nccl

struct ncclComm {
  std::string key;
  uint32_t rank = 0;
  uint32_t nranks = 0;
  int device = 0;  // the CUDA device current at init (0 without a GPU)
  bool blocking = true;
  iris::TrafficClass traffic_class = iris::TrafficClass::kAuto;
  // Whether its ranks wait on the host when they share a GPU (IRISD_NCCL_SHARED_GPU; default
  // host).
  bool shared_gpu_waits_on_host = true;
  std::shared_ptr<iris::nccl::Lane> lane;
  iris::Communicator comm;
  // Where the ranks find each other: the meeting point and secret of the id (empty: through
  // this node's irisd alone), or the nodes a split's parent already knows. `nodes` is set once
  // joined when the ranks span several nodes.
  std::string meeting_point;
  std::string secret;
  std::optional<iris::NodeSet> nodes;
  // The fallback NCCL's communicator of the same ranks (IRISD_NCCL_FALLBACK), made at init.
  ncclComm_t fallback = nullptr;

  // A non-blocking init joins on this thread; ncclCommGetAsyncError says ncclInProgress until it
  // is done. ncclCommAbort stops its waits for other nodes' ranks (the meeting point, the
  // nodes' join) by setting init_stop instead of waiting them out.
  std::thread init_thread;
  std::atomic<bool> init_stop{false};
  std::atomic<bool> ready{false};

  // Which GPU each rank uses, gathered through irisd by an all-gather that init submits and the
  // first operation on a stream waits for (a thread that initializes several ranks cannot wait in
  // init): ranks that share a GPU wait on the host (unless shared_gpu_waits_on_host is off).
  iris::Buffer gpu_table;
  iris::Request gpu_exchange;
  std::optional<bool> shares_gpu;

  iris::nccl::HostScratch host_scratch;
  std::shared_ptr<iris::nccl::GpuScratch> gpu;  // made by the first operation on a stream
  uint64_t children = 0;                        // communicators split or shrunk from this one
  std::map<int, iris::nccl::CustomReduction> custom_ops;
  std::array<iris::nccl::OpTally, iris::nccl::kOpKindCount> tally{};
  std::array<iris::nccl::OpTally, iris::nccl::kOpKindCount> reported{};  // sent to irisd
  std::chrono::steady_clock::time_point reported_at{};
  int next_custom_op = ncclNumOps;

  // The first failure seen asynchronously (a stream-ordered operation's request, a failed init),
  // and the requests still to watch. Guarded: torch's watchdog asks from its own thread.
  std::mutex mutex;
  ncclResult_t async_error = ncclSuccess;
  std::string async_message;
  std::vector<iris::Request> in_flight;

  // Records a failure for ncclCommGetAsyncError (the first one stays).
  void fail(ncclResult_t result, const std::string& message);
  // Polls the requests in flight; returns the communicator's error state.
  ncclResult_t poll();
  // Keeps a stream-ordered operation's request to watch (done ones are dropped on the way).
  void watch(iris::Request request);
  // Counts an operation; the report says, per kind, where its bytes moved (NCCL_DEBUG=INFO
  // prints it when the communicator ends).
  void count(iris::nccl::OpKind kind, const iris::nccl::PlanBytes& bytes, bool on_gpu);
  // An operation the fallback NCCL ran, writing `bytes` into this rank's memory.
  void count_fallback(iris::nccl::OpKind kind, uint64_t bytes);
  std::string tally_report() const;
  // Sends irisd what the tally gained since the last report (iris-ctl stats, /metrics): at most
  // once a second unless `now_anyway` (the communicator ends); a failure only costs the figures.
  void report_tally(bool now_anyway);
  // The process exits with this communicator alive (live_comms.hpp): what report_tally has not
  // sent yet goes now, and NCCL_DEBUG=INFO prints the counts, unless a call of another thread is
  // inside it (its tally is that thread's then; exit does not wait for it).
  void report_at_exit();
  // Submits the exchange of the ranks' GPUs (PCI bus ids; empty without one).
  void start_gpu_exchange(const std::string& bus_id);
  // Whether another rank uses this rank's GPU; waits for the exchange the first time.
  bool shares_a_gpu();
  // Throws the communicator's error when it has one, or ncclInvalidUsage while it initializes.
  void check_usable(const char* function);

  // NCCL lets another thread abort a communicator that a call is inside. So each call that uses
  // it counts itself in (iris::nccl::CommCall), a call waiting on the host for irisd looks at
  // `aborting` every kAbortPoll and leaves with an error, and ncclCommAbort ends the
  // communicator only once no call is inside. Operations queued in another thread's open group
  // are not inside yet: they hold a reference (iris::nccl::CommRef) that keeps this struct, and
  // ncclGroupEnd refuses them once the communicator was ended.
  static constexpr std::chrono::milliseconds kAbortPoll{10};
  std::atomic<bool> aborting{false};
  // Waits for `request` on the host; throws ncclInvalidUsage once ncclCommAbort began.
  void wait_for(iris::Request& request) const;
  // ncclCommAbort: no call may enter from now on; returns once none is inside.
  void stop_calls();

 private:
  friend class iris::nccl::CommCall;
  friend class iris::nccl::CommRef;
  // Lock-free: a call costs two atomic additions (with a mutex, a 4 KiB host call took
  // 1.03-1.05x the previous version's; docs/PERFORMANCE-HISTORY.md); ncclCommAbort waits on
  // the count (std::atomic::wait).
  std::atomic<uint32_t> calls{0};
  std::atomic<uint32_t> refs{1};  // the application's handle, and each CommRef
};

namespace iris::nccl {
// One API call inside a communicator (ncclComm::aborting), from its checks to the end of its
// operation (a group's operations hold theirs until ncclGroupEnd ran them). Throws
// ncclInvalidUsage naming `function` when the communicator is being aborted.
// Keeps a communicator's struct (not the communicator) alive: the last of the handle's end
// (end_comm) and the references frees it.
class CommRef {
 public:
  CommRef() = default;
  explicit CommRef(ncclComm* comm);
  CommRef(CommRef&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  CommRef& operator=(CommRef&& other) noexcept;
  ~CommRef() { release(comm_); }
  // Drops one reference to `comm`; the last frees it.
  static void release(ncclComm* comm);

 private:
  ncclComm* comm_ = nullptr;
};

class CommCall {
 public:
  CommCall(ncclComm* comm, const char* function);
  CommCall(CommCall&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  CommCall& operator=(CommCall&&) = delete;
  ~CommCall();

 private:
  void leave();
  ncclComm* comm_ = nullptr;
};
}  // namespace iris::nccl
