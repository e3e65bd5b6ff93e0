// libiris internals: the session, assembled from its parts: the link to irisd (daemon_link: the
// attach connection, session calls, which irisd answered), the registrations (registrations:
// buffers, first-use GPU registrations, done flags), the communicators (communicators), the
// submissions (submissions: ring, completion slots, argument areas, waits), and here submit()
// over them and the CUDA-graph plans (graph_capture.cpp). A resume (session_resume.cpp) runs each part's step in
// turn. Shared by Client, Communicator, Buffer and Request through shared_ptr, so a Request
// outliving its Client still finds the segment mapped.
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
#include "client/src/communicators.hpp"
#include "client/src/daemon_link.hpp"
#include "client/src/daemon_watch.hpp"
#include "client/src/registrations.hpp"
#include "client/src/submissions.hpp"
#include "iris/buffer.hpp"
#include "iris/client.hpp"
#include "iris/error.hpp"
#include "iris/request.hpp"
#include "iris/shared/descriptor.hpp"
#include "iris/shared/segment_layout.hpp"
#include "iris/shared/shm_segment.hpp"
#include "iris/shared/unix_socket.hpp"

namespace iris {

struct Client::Impl : std::enable_shared_from_this<Client::Impl>, GpuRegistrationCache::Session {
  Impl(const ClientOptions& options);
  ~Impl() override;

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

  Buffer allocate(std::size_t bytes);
  // A registration as a Buffer, recorded in the registrations (see Registrations::record; nullopt:
  // register again); `mapping`: where this process maps host memory irisd allocated.
  std::optional<Buffer> add_buffer(uint64_t id, uint64_t connection, void* base, std::size_t bytes,
                                   std::shared_ptr<shm::ShmSegment> mapping, bool gpu,
                                   std::shared_ptr<const net::Fd> memfd = nullptr,
                                   GpuVendor vendor = GpuVendor::kCuda,
                                   const std::function<void()>& map_in = {});
  // Moves the pages of [ptr, ptr + bytes) onto memory irisd allocated (see Client::register_host).
  Buffer register_host(void* ptr, std::size_t bytes);
  // Registers GPU memory of this process through the vendor's runtime (IPC handle or VMM fds).
  Buffer register_gpu_buffer(GpuVendor vendor, void* device_ptr, std::size_t bytes);
  // GPU memory the caller did not register, registered on first use (GpuRegistrationCache);
  // null when this session cannot (the engine takes no CUDA memory, no driver, turned off).
  GpuRegistrationCache* gpu_cache();
  // GpuRegistrationCache::Session, over the parts.
  Registration register_range(void* base, std::size_t bytes) override {
    return registrations->register_range(base, bytes);
  }
  bool answered_by_current_irisd(uint64_t connection) const override {
    return link->answered_by_current_irisd(connection);
  }
  uint64_t current_connection() const override { return link->current_connection(); }
  void deregister(uint64_t buffer_id, uint64_t connection) override {
    registrations->deregister(buffer_id, connection);
  }
  bool finished(uint32_t slot, uint32_t generation) const override {
    return submissions->finished(slot, generation);
  }
  void detach();
  // Throws kInvalidArgument in a process other than the one that attached (a forked child):
  // the ring has one producer, and the session's connection is the parent's.
  void check_owner() const { link->check_owner(); }
  // True once irisd marked the segment stopped (a shared-memory load, no syscall).
  bool daemon_stopped() const;
  // True once irisd is gone for good: it closed the session, or did not come back within the
  // resume window (at once with a window of 0), or the client detached. While the session
  // resumes it is false: calls wait (test() reports not done).
  bool daemon_gone() const { return link->gone(); }
  // Throws kDaemonGone once irisd is known to be gone (two loads: for paths that poll, such
  // as Request::test, which must notice without a syscall per call).
  void check_daemon();

  ClientOptions options;
  std::chrono::microseconds wait_spin{50};  // ClientOptions::wait_spin, resolved
  shm::ShmSegment segment;
  shm::SegmentView view;
  std::atomic<uint64_t> session_id{0};  // a resumed session gets a new one
  std::string engine;
  std::string daemon_version;
  std::unique_ptr<StreamFlagsMapping> stream_flags;

  // The parts (see the top of this file).
  std::unique_ptr<DaemonLink> link;
  std::unique_ptr<Registrations> registrations;
  std::unique_ptr<Communicators> comms;
  std::unique_ptr<Submissions> submissions;

 private:
  // The session after irisd went away (session_resume.cpp). Runs on the daemon watch's thread:
  // attaches again within the resume window and brings back the buffers, communicators, graph
  // plans and unfinished requests. Returns the new connection to watch, or -1 when irisd is gone
  // for good (the link says why).
  int reattach(DaemonWatch& watch);
  // The release of the irisd this session is attached to now (daemon_version is the first's);
  // the daemon watch's thread alone uses it.
  std::string latest_daemon_version_;
  // irisd is gone for good, `why`: streams and sleepers let go.
  int give_up(std::string why);

  // The graph plans' resume step (registered again under the new ids), and the new ids held by
  // their records once the session is back.
  void resume_graph_plans(const std::map<uint64_t, uint64_t>& comm_ids);
  void carry_graph_plans(const std::map<uint64_t, uint64_t>& comm_ids);
  // Lets GPU streams waiting on this session's done flags go on (the daemon will not write them).
  void release_stream_waits();
  // The part of it for CUDA graphs' replays.
  void release_graph_waits();

  // The plan's graph was destroyed: tell irisd and free its slot. Runs on a GPU runtime thread.
  void release_graph_plan(uint32_t plan_slot);
  // The failure of a plan slot's last replay, if it failed.
  std::optional<Error> plan_failure(uint32_t plan_slot) const;

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

  // Last: it stops (its callback touching the members above) before they go.
  std::unique_ptr<DaemonWatch> watch_;
};

}  // namespace iris
