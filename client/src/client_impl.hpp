// libiris internals: the session, assembled from its parts: the link to irisd (daemon_link: the
// attach connection, session calls, which irisd answered), the registrations (registrations:
// buffers, first-use GPU registrations, done flags), the communicators (communicators), the
// submissions (submissions: ring, completion slots, argument areas, waits), the CUDA-graph plans
// (captured_plans), and here submit() and capture (graph_capture.cpp) over them. A resume
// (session_resume.cpp) runs each part's step in turn. Shared by Client, Communicator, Buffer and
// Request through shared_ptr, so a Request outliving its Client still finds the segment mapped.
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
#include "client/src/captured_plans.hpp"
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
  // Registers another client's host buffer with this session (see Client::share).
  Buffer share(const Buffer::Impl& other);
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
  std::unique_ptr<CapturedPlans> plans;

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

  // Lets GPU streams waiting on this session's done flags go on (the daemon will not write them).
  void release_stream_waits();

  // Last: it stops (its callback touching the members above) before they go.
  std::unique_ptr<DaemonWatch> watch_;
};

}  // namespace iris
