// The hsa engine: copies on MI300-series SDMA engines through ROCm's HSA runtime, its start,
// submission (planned pieces on the pair's engines), completion polling and stop. What it
// discovers of the node is in hsa_engine_discovery.cpp, its memory side in hsa_engine_memory.cpp.
#include "daemon/engines/hsa/hsa_engine.hpp"

#include "daemon/engines/hsa/kfd_topology.hpp"
#include "daemon/engines/hsa/memory_faults.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

namespace iris::daemon {

using hsa::read_recommended_sdma_masks;

std::unique_ptr<HsaEngine> HsaEngine::create(const EngineOptions& options,
                                             const std::string& reason, std::string& why_not) {
  const hsa::Runtime* runtime = hsa::load_runtime(why_not);
  if (runtime == nullptr) return nullptr;
  std::string hip_why;
  const hip::Runtime* hip = hip::load_runtime(hip_why);
  if (hip == nullptr)
    spdlog::warn("hsa engine: {}; host buffers work, GPU buffers cannot be registered", hip_why);
  try {
    return std::make_unique<HsaEngine>(*runtime, hip, options, reason);
  } catch (const std::exception& e) {
    why_not = e.what();
    return nullptr;
  }
}

HsaEngine::HsaEngine(const hsa::Runtime& hsa, const hip::Runtime* hip, const EngineOptions& options,
                     std::string reason)
    : Engine(options.inline_bytes),
      hsa_(hsa),
      hip_(hip),
      copy_timeout_ms_(options.copy_timeout_ms),
      signals_(hsa),
      event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!event_fd_) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  // ROCr reads these at start: with either set to 0 it quietly runs copies (all, or those
  // between GPUs) as blit kernels on compute units, which irisd exists to avoid and would count
  // as copy-engine bytes.
  for (const char* variable : {"HSA_ENABLE_SDMA", "HSA_ENABLE_PEER_SDMA"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && std::string(value) == "0")
      throw Error(ErrorCode::kUnavailable,
                  std::string(variable) +
                      "=0 in irisd's environment makes ROCm copy with kernels on compute units, "
                      "not SDMA engines: unset it for irisd (systemd: remove the Environment= "
                      "line), or run --engine host on purpose");
  }
  description_.name = "hsa";
  description_.reason = std::move(reason);
  int hip_version = 0;
  if (hip_ != nullptr && hip_->hipRuntimeGetVersion(&hip_version) == hipSuccess)
    hip_behaviour_ = hip::behaviour_of(hip_version);
  discover_agents();
  if (gpus_.empty()) throw Error(ErrorCode::kUnavailable, "the ROCm runtime reports no GPU agent");
  // Without a handler ROCr aborts the whole process on a GPU memory fault: every tenant would go.
  if (const hsa_status_t st =
          hsa_.hsa_amd_register_system_event_handler(hsa::MemoryFaults::on_system_event, nullptr);
      st != HSA_STATUS_SUCCESS)
    spdlog::warn("hsa engine: cannot register for GPU memory faults ({}): one would stop irisd",
                 hsa_.describe(st));
  query_engines(read_recommended_sdma_masks(options.kfd_topology));
  planner_.emplace(
      static_cast<int>(gpus_.size()), [this](int src, int dst) { return pair_engines(src, dst); },
      options.split_bytes);
  uint16_t major = 0, minor = 0;
  hsa_.hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MAJOR, &major);
  hsa_.hsa_system_get_info(HSA_SYSTEM_INFO_VERSION_MINOR, &minor);
  fill_description(major, minor);
  spdlog::info("hsa engine: {} GPU(s), {}; {}", gpus_.size(), description_.driver_version,
               description_.copy_method);
}

HsaEngine::~HsaEngine() {
  stop();
  for (const StagingBlock& b : staging_blocks_) {
    hsa_.hsa_amd_memory_unlock(b.host);
    std::free(b.host);
  }
}

void HsaEngine::stop() {
  // Copies still running write into buffers about to be unmapped: give them until their
  // deadlines.
  for (const InFlight& f : in_flight_) {
    while (hsa_.hsa_signal_load_scacquire(f.signal) > 0 &&
           std::chrono::steady_clock::now() < f.deadline)
      ::usleep(100);
  }
}

bool HsaEngine::keeps_latency_engine(int device) const {
  // Judged by the pair irisd's tenants share most: the GPU's copies into host memory.
  return std::popcount(hsa::usable_engines(pair_engines(device, kHostMemory))) > 1;
}

hsa::PairEngines HsaEngine::pair_engines(int src_device, int dst_device) const {
  const std::size_t n = gpus_.size() + 1;
  return pairs_[(src_device + 1) * n + (dst_device + 1)];
}

hsa_agent_t HsaEngine::agent_of(int device) const {
  return device == kHostMemory ? cpu_ : gpus_.at(device).agent;
}

void* HsaEngine::agent_address(const std::byte* address, int device) const {
  if (device == kHostMemory) {
    // The locked range with the greatest base not above `address`.
    auto it = locked_.lower_bound(address);
    if (it != locked_.end() && address < it->first + it->second.bytes)
      return it->second.agent_address + (address - it->first);
  }
  return const_cast<std::byte*>(address);
}

std::chrono::steady_clock::time_point HsaEngine::deadline_for(uint64_t bytes) const {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(copy_timeout_ms_) +
         std::chrono::milliseconds(bytes >> 20);
}

void HsaEngine::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(event_fd_.get(), &one, sizeof(one));
}

bool HsaEngine::issue(const CopyRequest& copy, const hsa::PlannedPiece& piece,
                      hsa_signal_t signal) {
  void* dst = agent_address(copy.dst + piece.offset, copy.dst_device);
  const void* src = agent_address(copy.src + piece.offset, copy.src_device);
  const hsa_status_t st = on_engine_ && piece.engine != 0
                              ? hsa_.hsa_amd_memory_async_copy_on_engine(
                                    dst, agent_of(copy.dst_device), src, agent_of(copy.src_device),
                                    piece.bytes, 0, nullptr, signal, piece.engine, true)
                              : hsa_.hsa_amd_memory_async_copy(dst, agent_of(copy.dst_device), src,
                                                               agent_of(copy.src_device),
                                                               piece.bytes, 0, nullptr, signal);
  if (st == HSA_STATUS_SUCCESS) return true;
  spdlog::error("hsa engine: copy of {} bytes ({} -> {}, engine mask {:#x}) refused: {}",
                piece.bytes, copy.src_device, copy.dst_device, piece.engine, hsa_.describe(st));
  return false;
}

void HsaEngine::submit(std::span<const CopyRequest> copies) {
  shapes_.clear();
  for (const CopyRequest& c : copies)
    shapes_.push_back({c.src_device, c.dst_device, c.bytes, c.queue});
  const std::vector<hsa::PlannedPiece>& pieces = planner_->plan(shapes_);
  std::size_t first = 0;
  while (first < pieces.size()) {
    const std::size_t index = pieces[first].copy;
    std::size_t last = first;
    while (last < pieces.size() && pieces[last].copy == index) ++last;
    const CopyRequest& copy = copies[index];
    const bool on_sdma = on_engine_ && pieces[first].engine != 0;
    const TransferPath path = on_sdma || copy.src_device != copy.dst_device
                                  ? TransferPath::kCopyEngine
                                  : TransferPath::kComputeUnits;
    const CopyCompletion whole{copy.cookie, ErrorCode::kOk, path, copy.bytes};
    const uint64_t split =
        last - first > 1 ? splits_.begin(whole, static_cast<uint32_t>(last - first)) : 0;
    for (std::size_t p = first; p < last; ++p) {
      const hsa::PlannedPiece& piece = pieces[p];
      CopyCompletion done{copy.cookie, ErrorCode::kOk, path, piece.bytes};
      if (piece.copy_agent == hsa::kHostAgent) {
        // Host to host: no GPU agent is involved, so no engine can run it.
        std::memcpy(copy.dst + piece.offset, copy.src + piece.offset, piece.bytes);
        done.path = TransferPath::kComputeUnits;
        finished_at_submit_.emplace_back(split, done);
        continue;
      }
      hsa_signal_t signal{};
      try {
        signal = signals_.acquire();
      } catch (const Error& e) {
        spdlog::error("hsa engine: {}", e.what());
        planner_->finished(piece);
        done.code = ErrorCode::kEngineError;
        finished_at_submit_.emplace_back(split, done);
        continue;
      }
      if (!issue(copy, piece, signal)) {
        signals_.release(signal);
        planner_->finished(piece);
        done.code = ErrorCode::kEngineError;
        finished_at_submit_.emplace_back(split, done);
        continue;
      }
      InFlight f{signal, piece, split, done, deadline_for(piece.bytes)};
      f.src = reinterpret_cast<uint64_t>(agent_address(copy.src + piece.offset, copy.src_device));
      f.dst = reinterpret_cast<uint64_t>(agent_address(copy.dst + piece.offset, copy.dst_device));
      f.src_owner = copy.src_owner;
      f.dst_owner = copy.dst_owner;
      in_flight_.push_back(std::move(f));
    }
    first = last;
  }
  if (!finished_at_submit_.empty()) wake();
}

std::size_t HsaEngine::poll(std::vector<CopyCompletion>& out) {
  const std::size_t before = out.size();
  for (const auto& [split, c] : finished_at_submit_) splits_.retire(split, c, out);
  finished_at_submit_.clear();
  if (in_flight_.empty() && quarantined_.empty()) return out.size() - before;
  fail_faulted_copies();
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < in_flight_.size();) {
    InFlight& f = in_flight_[i];
    const hsa_signal_value_t value = hsa_.hsa_signal_load_scacquire(f.signal);
    if (value > 0 && now < f.deadline) {
      ++i;
      continue;
    }
    ErrorCode code = ErrorCode::kOk;
    if (value > 0) {
      spdlog::error(
          "hsa engine: a copy of {} bytes on GPU {} (engine mask {:#x}) has not completed after "
          "{} ms; failing its collective (a lost completion signal, or a hung SDMA queue: "
          "check dmesg for amdgpu errors)",
          f.piece.bytes, f.piece.copy_agent, f.piece.engine,
          copy_timeout_ms_ + (f.piece.bytes >> 20));
      quarantined_.push_back({f.signal, std::move(f.src_owner), std::move(f.dst_owner)});
      code = ErrorCode::kEngineError;
    } else {
      if (value < 0) {
        spdlog::error("hsa engine: a copy of {} bytes on GPU {} signalled an error (value {})",
                      f.piece.bytes, f.piece.copy_agent, static_cast<int64_t>(value));
        code = ErrorCode::kEngineError;
      }
      signals_.release(f.signal);
    }
    if (f.staging >= 0) {
      // A done-flag write. A timed-out one keeps its word: the copy may still read it.
      if (value <= 0) free_staging_.push_back(f.staging);
    } else {
      planner_->finished(f.piece);
      f.completion.code = code;
      splits_.retire(f.split, f.completion, out);
    }
    in_flight_[i] = in_flight_.back();
    in_flight_.pop_back();
  }
  for (std::size_t i = 0; i < quarantined_.size();) {
    if (hsa_.hsa_signal_load_scacquire(quarantined_[i].signal) > 0) {
      ++i;
      continue;
    }
    spdlog::info(
        "hsa engine: a timed-out copy completed late; its signal is reused and its "
        "memory let go");
    signals_.release(quarantined_[i].signal);
    quarantined_[i] = std::move(quarantined_.back());
    quarantined_.pop_back();
  }
  return out.size() - before;
}

void HsaEngine::fail_faulted_copies() {
  for (const hsa::MemoryFault& fault : hsa::MemoryFaults::instance().take()) {
    bool matched = false;
    for (InFlight& f : in_flight_) {
      const bool hit = (fault.address >= f.src && fault.address < f.src + f.piece.bytes) ||
                       (fault.address >= f.dst && fault.address < f.dst + f.piece.bytes);
      if (!hit) continue;
      f.deadline = std::chrono::steady_clock::time_point::min();  // fails on this pass
      matched = true;
    }
    // A fault in none of our ranges: fail what runs on the faulting GPU (its queue may be dead).
    if (!matched)
      for (InFlight& f : in_flight_)
        if (f.piece.copy_agent >= 0 && gpus_[f.piece.copy_agent].agent.handle == fault.agent)
          f.deadline = std::chrono::steady_clock::time_point::min();
    spdlog::error(
        "hsa engine: GPU memory fault at {:#x} (reasons {:#x}); failing the copies it "
        "touches, serving the rest",
        fault.address, fault.reasons);
  }
}

}  // namespace iris::daemon
