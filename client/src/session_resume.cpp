// Client::Impl after irisd went away: attach again to the same socket within the resume window,
// hand the next irisd the session's segment and host memory, register the GPU memory, communicators
// and graph plans again under the ids and places they had, and submit again the requests irisd had
// not completed. Everything a collective needs lives here in the client (its memory, its streams
// waiting on flags, its sequence of calls), so a restart of irisd is a pause. Why running an
// unfinished collective again is safe, and where it is not: docs/RESTARTS.md.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "client/src/attach_handshake.hpp"
#include "client/src/client_impl.hpp"
#include "client/src/debug_log.hpp"
#include "iris/shared/collective_shape.hpp"
#include "iris/shared/futex.hpp"

namespace iris {

namespace {
using clock = std::chrono::steady_clock;
// Attempts to reach the next irisd: often at first (a restart by systemd takes milliseconds to
// seconds), then every 100 ms.
constexpr auto kFirstRetry = std::chrono::milliseconds(2);
constexpr auto kMaxRetry = std::chrono::milliseconds(100);
// The next irisd's answer to the resume's attach (its engine may still be starting).
constexpr auto kResumeAnswerTimeout = std::chrono::milliseconds(10000);

std::string millis(clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}
}  // namespace

void Client::Impl::wait_while_resuming(clock::time_point deadline) const {
  std::unique_lock lock(link_mutex_);
  while (link_.load(std::memory_order_acquire) == Link::kResuming) {
    const auto now = clock::now();
    if (now >= deadline) return;
    link_changed_.wait_for(lock, std::min<clock::duration>(deadline - now, kMaxRetry));
  }
}

int Client::Impl::reattach(DaemonWatch& watch) {
  const auto started = clock::now();
  auto give_up = [&](std::string why) {
    {
      std::lock_guard lock(link_mutex_);
      gone_why_ = std::move(why);
      link_.store(Link::kGone, std::memory_order_release);
    }
    link_changed_.notify_all();
    // No irisd writes a done flag any more: the GPU streams go on (their receive buffers
    // unwritten; the host learns why from its next call), and sleepers wake to see it.
    release_stream_waits();
    view.header->completion_epoch.fetch_add(1, std::memory_order_seq_cst);
    shm::futex_wake_all(view.header->completion_epoch);
    return -1;
  };
  if (view.header->daemon_state.load(std::memory_order_acquire) ==
      static_cast<uint32_t>(shm::DaemonState::kSessionEnded))
    return give_up("irisd ended this session (the daemon log says why); attach again");
  if (resume_window.count() == 0)
    return give_up(
        "irisd stopped or died; attach again once it is back (this client does not "
        "wait for it: its resume window is 0)");
  {
    std::lock_guard lock(link_mutex_);
    link_.store(Link::kResuming, std::memory_order_release);
  }
  const auto deadline = started + resume_window;
  connection_left_ = connection_.load(std::memory_order_relaxed);
  // No entry reaches a ring until the session is back; then the unfinished ones go in first.
  std::unique_lock submitting(submit_mutex_);
  // The next irisd reads the ring from where the client leaves it: empty.
  view.ring_control->head.store(0, std::memory_order_relaxed);
  view.ring_control->tail.store(0, std::memory_order_release);

  v1::AttachRequest request;
  request.set_client_name(options.client_name);
  request.mutable_resume()->set_previous_session_id(session_id);
  request.mutable_resume()->set_ring_depth(view.ring_depth);
  request.mutable_resume()->set_previous_daemon_version(latest_daemon_version_);
  std::string last = "irisd is not back";
  auto pause = kFirstRetry;
  bool stopped = false;  // the client detached meanwhile
  // Waits before the next attempt; false (and gives up) once the window has passed.
  auto wait_to_retry = [&](const std::string& why) -> bool {
    last = why;
    const auto now = clock::now();
    if (now >= deadline) return false;
    if (!watch.pause(std::chrono::duration_cast<std::chrono::milliseconds>(
            std::min<clock::duration>(pause, deadline - now)))) {
      stopped = true;
      return false;
    }
    pause = std::min(pause * 2, kMaxRetry);
    return true;
  };
  auto window_passed = [&] {
    return give_up(stopped ? "this client detached while irisd was away"
                           : "irisd did not come back within this client's resume window (" +
                                 millis(resume_window) + "; " + last +
                                 "); attach again once it is back, or set a longer window "
                                 "(ClientOptions::resume_window, IRIS_RESUME_WINDOW_MS)");
  };
  for (;;) {
    request.mutable_resume()->set_next_buffer_id(next_buffer_id_.load(std::memory_order_relaxed));
    request.mutable_resume()->set_held_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - started).count());
    std::optional<client::Attached> attached;
    try {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
      attached = client::attach(
          options.socket_path, request,
          std::clamp(left, std::chrono::milliseconds(1), kResumeAnswerTimeout), 2, {segment.fd()});
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnavailable)
        return give_up("irisd came back but would not resume this session: " + e.message());
      if (!wait_to_retry(e.message())) return window_passed();
      continue;
    }
    if (!attached->response.resumed() || attached->fds.size() != 2)
      return give_up("the irisd that came back does not resume sessions (version " +
                     attached->response.daemon_version() + "); attach again");
    {
      // The same descriptor numbers as before: threads reading them never see a closed one.
      std::lock_guard calls(attach_mutex_);
      ::dup3(attached->connection.get(), attach_fd.get(), O_CLOEXEC);
      ::dup3(attached->fds[0].get(), wake_fd.get(), O_CLOEXEC);
      // Before the tables are read below (answered_by_current_irisd).
      connection_.fetch_add(1, std::memory_order_release);
    }
    try {
      settle_stream_completions();
      resume_buffers();
      const auto comm_ids = resume_comms();
      resume_graph_plans(comm_ids);
      resubmit(comm_ids);  // makes no call: cannot fail
      session_id = attached->response.session_id();
      latest_daemon_version_ = attached->response.daemon_version();
      break;
    } catch (const Error& e) {
      // That irisd went too (killed again while we resumed): try the next one. Anything else
      // it refused is final.
      const bool went = e.code() == ErrorCode::kDaemonGone || e.code() == ErrorCode::kUnavailable;
      if (went && wait_to_retry(e.message())) continue;
      ::shutdown(attach_fd.get(), SHUT_RDWR);  // the new irisd ends the half-resumed session
      if (went) return window_passed();
      return give_up("irisd came back but this session could not resume: " + e.message());
    }
  }
  submitting.unlock();
  {
    std::lock_guard lock(link_mutex_);
    link_.store(Link::kUp, std::memory_order_release);
  }
  link_changed_.notify_all();
  ring_doorbell();
  return attach_fd.get();
}

void Client::Impl::settle_stream_completions() {
  std::lock_guard lock(slots_mutex_);
  bool settled = false;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    const SlotState& s = slots_[i];
    if (!s.in_use || !s.queued || (s.entry.flags & shm::kStreamOrdered) == 0 ||
        poll(i, s.generation))
      continue;
    // irisd writes the done flag after the copies and before the slot: a flag written by the
    // irisd that died means its stream went on (its buffers may be rewritten already), so the
    // request completed and must not run again.
    if (stream_flags->done_reached(i, s.generation)) {
      view.slots[i].word.store(shm::pack_completion(s.generation, ErrorCode::kOk),
                               std::memory_order_release);
      settled = true;
    }
  }
  if (settled) {
    view.header->completion_epoch.fetch_add(1, std::memory_order_seq_cst);
    shm::futex_wake_all(view.header->completion_epoch);
  }
}

void Client::Impl::resume_buffers() {
  auto adopt = [this](uint64_t id, uint64_t bytes, int memfd) {
    v1::SessionRequest request;
    request.mutable_adopt_host()->set_buffer_id(id);
    request.mutable_adopt_host()->set_bytes(bytes);
    call(request, "resume a host buffer", {memfd}, nullptr);
  };
  {
    // Held throughout: a buffer freed meanwhile is either carried and then freed on the next
    // irisd, or neither (forget_buffer).
    std::lock_guard lock(buffers_mutex_);
    for (const auto& [address, b] : buffers_) {
      void* base = reinterpret_cast<void*>(address);
      if (b.memfd) {
        adopt(b.id, b.bytes, b.memfd->get());
      } else if (b.gpu) {
        const auto runtime = make_gpu_runtime(b.vendor);
        // Freed without being deregistered (a cudaFree in user code): it stays behind, and a
        // request naming it fails as an unknown buffer; the rest of the session resumes.
        bool present = true;
        try {
          runtime->use_context_of(base);  // this thread is libiris's, with no context of its own
        } catch (const Error&) {
          present = false;
        }
        if (!present || !runtime->chunk_of(address)) {
          client::debug_log("resume: GPU buffer " + std::to_string(b.id) +
                            " was freed; not registered again");
          continue;
        }
        register_gpu(*runtime, b.vendor, base, b.bytes, b.id);
      }
    }
  }
  {
    std::lock_guard lock(args_mutex_);
    for (const ArgsArena& arena : args_arenas_)
      adopt(arena.buffer_id, arena.stride * slots_.size(), arena.mapping.fd());
  }
  if (GpuRegistrationCache* cache = existing_gpu_cache()) {
    cache->for_each_registration([&](uintptr_t begin, uintptr_t end, uint64_t id, bool present) {
      // Memory freed since (torch's empty_cache, an OOM retry, a graph capture entered, an
      // expandable segment unmapped): dropped; memory allocated there again registers anew.
      if (!present) {
        client::debug_log("resume: first-use GPU registration " + std::to_string(id) +
                          " names freed memory; dropped");
        return;
      }
      gpu_cache_runtime_->use_context_of(reinterpret_cast<void*>(begin));
      register_gpu(*gpu_cache_runtime_, GpuVendor::kCuda, reinterpret_cast<void*>(begin),
                   end - begin, id);
    });
  }
  // The same GPU memory: streams waiting on it go on waiting.
  std::lock_guard lock(done_flags_mutex_);
  if (done_flags_registration_)
    call(*done_flags_registration_, "register stream done flags again", {}, nullptr);
}

std::map<uint64_t, uint64_t> Client::Impl::resume_comms() {
  std::vector<std::shared_ptr<CommRank>> comms;
  {
    // Under the lock that Communicator::destroy marks them under: one destroyed after this is
    // carried, and destroyed again there (call_naming).
    std::lock_guard lock(comms_mutex_);
    for (const auto& weak : comms_)
      if (auto comm = weak.lock(); comm && !comm->destroyed) comms.push_back(std::move(comm));
  }
  std::map<uint64_t, uint64_t> ids;  // the previous irisd's id -> the new one
  for (const auto& comm : comms) {
    const uint64_t old_id = comm->id.load();
    const uint64_t next = comm->next_seq.load();
    // The collectives this rank submitted that irisd had not completed.
    std::set<uint64_t> unfinished;
    {
      std::lock_guard lock(slots_mutex_);
      for (uint32_t i = 0; i < slots_.size(); ++i) {
        const SlotState& s = slots_[i];
        if (s.in_use && s.queued && s.entry.comm_id == old_id &&
            !shm::is_point_to_point(s.entry.opcode) && !poll(i, s.generation))
          unfinished.insert(s.entry.seq);
      }
    }
    const uint64_t resume_seq = unfinished.empty() ? next : *unfinished.begin();
    v1::SessionRequest request;
    auto* init = request.mutable_comm_init();
    init->set_key(comm->key);
    init->set_nranks(comm->nranks);
    init->set_rank(comm->rank);
    for (const std::string& address : comm->node_addresses) init->add_node_addresses(address);
    for (uint32_t node : comm->node_of_rank) init->add_node_of_rank(node);
    init->set_secret(comm->secret);
    init->set_op_timeout_ms(comm->op_timeout_ms);
    init->set_resume_seq(resume_seq);
    {
      std::lock_guard lock(comms_mutex_);
      init->set_comm_secret(comm->resume_secret);
    }
    for (uint64_t seq = resume_seq + 1; seq < next; ++seq) {
      if (unfinished.count(seq) != 0) continue;
      init->add_completed_seqs(seq);
      if (init->completed_seqs_size() > 1024)
        throw Error(ErrorCode::kLimitExceeded,
                    "communicator '" + comm->key + "' completed more than 1024 collectives after " +
                        "its oldest unfinished one (seq " + std::to_string(resume_seq) + ")");
    }
    add_p2p_progress(*comm, *init);
    const auto answer = call(request, "resume a communicator", {}, nullptr);
    ids[old_id] = answer.comm_id();
    std::lock_guard lock(comms_mutex_);
    comm->resume_secret = answer.comm_secret();
  }
  return ids;
}

void Client::Impl::add_p2p_progress(const CommRank& comm, v1::CommInitRequest& init) {
  // Positions of this communicator's sends and receives irisd has not completed, by channel.
  std::map<std::pair<bool, uint32_t>, std::set<uint64_t>> unfinished;
  {
    std::lock_guard lock(slots_mutex_);
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      const SlotState& s = slots_[i];
      if (s.in_use && s.queued && s.entry.comm_id == comm.id.load() &&
          shm::is_point_to_point(s.entry.opcode) && !poll(i, s.generation))
        unfinished[p2p_channel(s.entry)].insert(s.entry.seq);
    }
  }
  // The resume holds submit_mutex_, which guards p2p_posted.
  for (const auto& [channel, posted] : comm.p2p_posted) {
    const auto& open = unfinished[channel];
    auto* progress = init.add_p2p_progress();
    progress->set_send(channel.first);
    progress->set_peer(channel.second);
    const uint64_t below = open.empty() ? posted + 1 : *open.begin();
    progress->set_done_below(below);
    for (uint64_t k = below + 1; k <= posted; ++k)
      if (open.count(k) == 0) progress->add_done_after(k);
  }
}

void Client::Impl::resubmit(const std::map<uint64_t, uint64_t>& comm_ids) {
  producer_ =
      shm::RingProducer<shm::SubmitEntry>(view.ring_control, view.ring_entries, view.ring_depth);
  std::lock_guard lock(slots_mutex_);
  std::vector<uint32_t> unfinished;
  for (uint32_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].in_use && slots_[i].queued && !poll(i, slots_[i].generation))
      unfinished.push_back(i);
  std::sort(unfinished.begin(), unfinished.end(),
            [&](uint32_t a, uint32_t b) { return slots_[a].ticket < slots_[b].ticket; });
  bool failed_here = false;
  for (uint32_t slot : unfinished) {
    SlotState& s = slots_[slot];
    shm::SubmitEntry entry = s.entry;
    const bool nop = entry.opcode == static_cast<uint32_t>(shm::Opcode::kNop);
    const auto id = comm_ids.find(entry.comm_id);
    if (!nop && id == comm_ids.end()) {
      const std::string why =
          "irisd restarted while this request was in flight, and its communicator was destroyed";
      char* text = view.failures[slot].text;
      const std::size_t n = std::min(why.size(), shm::kFailureTextBytes - 1);
      std::memcpy(text, why.data(), n);
      text[n] = '\0';
      view.slots[slot].word.store(shm::pack_completion(s.generation, ErrorCode::kDaemonGone),
                                  std::memory_order_release);
      stream_flags->release(slot, s.generation);
      failed_here = true;
      continue;
    }
    if (!nop) entry.comm_id = id->second;
    entry.flags |= shm::kResubmitted;
    s.entry = entry;
    producer_.try_push(entry);  // room for every slot: the ring is empty and as deep
  }
  if (failed_here) {
    view.header->completion_epoch.fetch_add(1, std::memory_order_seq_cst);
    shm::futex_wake_all(view.header->completion_epoch);
  }
  // The session is back: the new ids hold from now on (an attempt that failed before this point
  // left them as they were, so the next one starts from the same state).
  {
    std::lock_guard plans(plans_mutex_);
    for (PlanRecord& plan : plan_records_)
      if (auto id = comm_ids.find(plan.entry.comm_id); plan.order != 0 && id != comm_ids.end())
        plan.entry.comm_id = id->second;
  }
  std::lock_guard comms(comms_mutex_);
  for (const auto& weak : comms_)
    if (auto comm = weak.lock())
      // Carried: its id is the irisd's that went (a communicator destroyed earlier and carried
      // nowhere keeps an older irisd's id, which may equal one of those).
      if (auto id = comm_ids.find(comm->id.load());
          id != comm_ids.end() && comm->connection == connection_left_) {
        comm->id.store(id->second);
        comm->connection = connection_.load(std::memory_order_relaxed);
      }
}

void Client::Impl::resume_graph_plans(const std::map<uint64_t, uint64_t>& comm_ids) {
  std::vector<std::pair<uint32_t, PlanRecord>> plans;
  {
    std::lock_guard lock(plans_mutex_);
    for (uint32_t p = 0; p < plan_records_.size(); ++p)
      if (plan_slot_used_[p] && plan_records_[p].order != 0)
        plans.emplace_back(p, plan_records_[p]);
  }
  // irisd matches plans across ranks in the order each rank registered them.
  std::sort(plans.begin(), plans.end(),
            [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  bool lost = false;
  for (auto& [slot, plan] : plans) {
    const auto id = comm_ids.find(plan.entry.comm_id);
    if (id == comm_ids.end())
      throw Error(ErrorCode::kNotFound,
                  "a CUDA graph holds a collective of a communicator that does not resume");
    plan.entry.comm_id = id->second;
    try {
      send_plan(slot, plan.entry, plan.v_args, nullptr);
    } catch (const Error& e) {
      // This irisd went too: the next one is tried. Anything else is this plan's alone (memory
      // it names freed since the capture): it fails at check_graphs(), the rest resumes.
      if (e.code() == ErrorCode::kDaemonGone || e.code() == ErrorCode::kUnavailable) throw;
      client::debug_log("a CUDA graph's collective (plan slot " + std::to_string(slot) +
                        ") did not resume: " + e.what());
      std::lock_guard lock(plans_mutex_);
      plan_records_[slot].lost =
          Error(e.code(),
                "a collective captured into a CUDA graph could not be carried to the "
                "restarted irisd: " +
                    e.message() +
                    " (memory it names freed since the capture?): destroy the graph and "
                    "capture it again (replaying it uses that memory)");
      lost = true;
    }
  }
  if (lost) {
    release_lost_plans();
    watch_->set_tending(true);
  }
}

}  // namespace iris
