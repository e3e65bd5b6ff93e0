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

namespace {
constexpr std::size_t kStagingWordsPerBlock = 1024;  // one locked page of 4-byte flag values

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<uint32_t> engine_indices(uint32_t mask) {
  std::vector<uint32_t> out;
  for (; mask != 0; mask &= mask - 1) out.push_back(static_cast<uint32_t>(std::countr_zero(mask)));
  return out;
}

std::string link_type_name(hsa_amd_link_info_type_t type) {
  switch (type) {
    case HSA_AMD_LINK_INFO_TYPE_XGMI:
      return "xgmi";
    case HSA_AMD_LINK_INFO_TYPE_PCIE:
      return "pcie";
    case HSA_AMD_LINK_INFO_TYPE_HYPERTRANSPORT:
      return "hypertransport";
    case HSA_AMD_LINK_INFO_TYPE_QPI:
      return "qpi";
    case HSA_AMD_LINK_INFO_TYPE_INFINBAND:
      return "infiniband";
  }
  return "link-" + std::to_string(static_cast<int>(type));
}
}  // namespace

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

void HsaEngine::discover_agents() {
  struct Found {
    const hsa::Runtime* hsa;
    std::vector<hsa_agent_t> gpus;
    std::optional<hsa_agent_t> cpu;
  } found{&hsa_, {}, {}};
  const hsa_status_t st = hsa_.hsa_iterate_agents(
      [](hsa_agent_t agent, void* data) {
        auto* f = static_cast<Found*>(data);
        hsa_device_type_t type{};
        if (f->hsa->hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type) != HSA_STATUS_SUCCESS)
          return HSA_STATUS_SUCCESS;
        if (type == HSA_DEVICE_TYPE_GPU) f->gpus.push_back(agent);
        if (type == HSA_DEVICE_TYPE_CPU && !f->cpu) f->cpu = agent;
        return HSA_STATUS_SUCCESS;
      },
      &found);
  if (st != HSA_STATUS_SUCCESS)
    throw Error(ErrorCode::kEngineError, "hsa_iterate_agents failed: " + hsa_.describe(st));
  if (!found.cpu) throw Error(ErrorCode::kUnavailable, "the ROCm runtime reports no CPU agent");
  cpu_ = *found.cpu;
  for (hsa_agent_t agent : found.gpus) {
    Gpu g{agent, "", -1, std::nullopt};
    uint32_t bdf = 0, domain = 0;
    hsa_.hsa_agent_get_info(agent, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_BDFID), &bdf);
    hsa_.hsa_agent_get_info(agent, hsa::kAgentInfoDomain, &domain);
    char bus[32];
    std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x.%x", domain, (bdf >> 8) & 0xff,
                  (bdf >> 3) & 0x1f, bdf & 0x7);
    g.bus_id = bus;
    struct PoolSearch {
      const hsa::Runtime* hsa;
      std::optional<hsa_amd_memory_pool_t> pool;
    } search{&hsa_, std::nullopt};
    hsa_.hsa_amd_agent_iterate_memory_pools(
        agent,
        [](hsa_amd_memory_pool_t pool, void* data) {
          auto* s = static_cast<PoolSearch*>(data);
          hsa_amd_segment_t segment{};
          s->hsa->hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, &segment);
          if (segment != HSA_AMD_SEGMENT_GLOBAL) return HSA_STATUS_SUCCESS;
          s->pool = pool;
          return HSA_STATUS_INFO_BREAK;
        },
        &search);
    g.pool = search.pool;
    gpus_.push_back(std::move(g));
    gpu_agents_.push_back(agent);
  }
  // HIP numbers devices its own way: match them by PCI bus id.
  if (hip_ == nullptr) return;
  int count = 0;
  if (const hipError_t r = hip_->hipGetDeviceCount(&count); r != hipSuccess)
    spdlog::warn("hsa engine: hipGetDeviceCount: {}", hip_->describe(r));
  for (int d = 0; d < count; ++d) {
    char bus[64] = {};
    if (hip_->hipDeviceGetPCIBusId(bus, sizeof(bus), d) != hipSuccess) continue;
    const std::string wanted = lower(bus);
    for (Gpu& g : gpus_)
      if (g.bus_id == wanted) g.hip_device = d;
  }
}

void HsaEngine::query_engines(const hsa::RecommendedMasks& recommended) {
  const std::size_t n = gpus_.size() + 1;
  pairs_.assign(n * n, {});
  on_engine_ = hsa_.hsa_amd_memory_async_copy_on_engine != nullptr &&
               hsa_.hsa_amd_memory_copy_engine_status != nullptr;
  if (!on_engine_) return;
  // Queried once, while nothing of ours runs: the status names the engines that serve each
  // pair; later queries would leave out engines merely busy with our own copies.
  for (int src = -1; src < static_cast<int>(gpus_.size()); ++src) {
    for (int dst = -1; dst < static_cast<int>(gpus_.size()); ++dst) {
      // A GPU to itself is no pair the status query knows (ROCr answers INVALID_AGENT, and
      // TransferBench skips it): filled in below.
      if (src == dst) continue;
      hsa::PairEngines& p = pairs_[(src + 1) * n + (dst + 1)];
      const hsa_status_t st =
          hsa_.hsa_amd_memory_copy_engine_status(agent_of(dst), agent_of(src), &p.available);
      if (st != HSA_STATUS_SUCCESS) {
        p.available = 0;
        spdlog::warn(
            "hsa engine: no SDMA engine offered for copies {} -> {} ({}); the runtime will "
            "choose for them",
            src == kHostMemory ? "host" : gpus_[src].bus_id,
            dst == kHostMemory ? "host" : gpus_[dst].bus_id, hsa_.describe(st));
      }
      if (hsa_.hsa_amd_memory_get_preferred_copy_engine != nullptr &&
          hsa_.hsa_amd_memory_get_preferred_copy_engine(agent_of(dst), agent_of(src),
                                                        &p.preferred) != HSA_STATUS_SUCCESS)
        p.preferred = 0;
      // KFD's recommendation for the link, where the kernel gives one, comes first.
      if (src != kHostMemory && dst != kHostMemory)
        if (auto it = recommended.find({gpus_[src].bus_id, gpus_[dst].bus_id});
            it != recommended.end())
          p.preferred = it->second;
    }
  }
  // Same-GPU copies are forced onto one of the GPU's own SDMA engines (any engine it runs
  // copies on for other pairs), never left to the runtime, which would run a blit kernel.
  for (int gpu = 0; gpu < static_cast<int>(gpus_.size()); ++gpu) {
    uint32_t own = pair_engines(gpu, kHostMemory).available;
    for (int peer = 0; peer < static_cast<int>(gpus_.size()); ++peer)
      if (peer != gpu) own |= pair_engines(gpu, peer).available;
    pairs_[(gpu + 1) * n + (gpu + 1)].available = own;
  }
}

void HsaEngine::fill_description(uint32_t hsa_major, uint32_t hsa_minor) {
  description_.driver_version =
      "HSA runtime " + std::to_string(hsa_major) + "." + std::to_string(hsa_minor);
  const int hip_version = hip_behaviour_.version;
  if (hip_version > 0)
    description_.driver_version += ", HIP " + std::to_string(hip_version / 10000000) + "." +
                                   std::to_string((hip_version / 100000) % 100);
  description_.copy_method =
      on_engine_ ? "hsa_amd_memory_async_copy_on_engine (SDMA engine chosen per copy from "
                   "hsa_amd_memory_copy_engine_status, force_copy_on_sdma)"
                 : "hsa_amd_memory_async_copy (the ROCm runtime picks the engine: this ROCm lacks "
                   "hsa_amd_memory_async_copy_on_engine, which came with ROCm 5.6)";
  auto env = [](const char* variable) {
    const char* value = std::getenv(variable);
    return std::string(variable) + "=" + (value != nullptr ? value : "unset");
  };
  description_.copy_method += "; " + env("HSA_ENABLE_SDMA") + ", " + env("HSA_ENABLE_PEER_SDMA");
  description_.runtime_library = hsa_.library + (hip_ != nullptr ? ", " + hip_->library : "");
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    const Gpu& g = gpus_[i];
    char name[64] = {}, product[64] = {};
    hsa_.hsa_agent_get_info(g.agent, HSA_AGENT_INFO_NAME, name);
    hsa_.hsa_agent_get_info(g.agent, static_cast<hsa_agent_info_t>(HSA_AMD_AGENT_INFO_PRODUCT_NAME),
                            product);
    DeviceDescription d;
    d.name = std::string(product[0] != 0 ? product : "AMD GPU") + " (" + name + ")";
    d.bus_id = g.bus_id;
    d.memory_bytes = 0;
    if (g.pool) {
      size_t size = 0;
      hsa_.hsa_amd_memory_pool_get_info(*g.pool, HSA_AMD_MEMORY_POOL_INFO_SIZE, &size);
      d.memory_bytes = size;
    }
    const int self = static_cast<int>(i);
    uint32_t engines = pair_engines(kHostMemory, self).available |
                       pair_engines(self, kHostMemory).available |
                       pair_engines(self, self).available;
    for (int peer = 0; peer < static_cast<int>(gpus_.size()); ++peer)
      engines |= pair_engines(self, peer).available;
    for (uint32_t e : engine_indices(engines))
      d.engines.push_back({"sdma-" + std::to_string(e), e});
    if (engines == 0) {
      uint32_t count = 0, xgmi = 0;
      hsa_.hsa_agent_get_info(g.agent, hsa::kAgentInfoNumSdmaEngines, &count);
      hsa_.hsa_agent_get_info(g.agent, hsa::kAgentInfoNumSdmaXgmiEngines, &xgmi);
      for (uint32_t e = 0; e < count + xgmi; ++e)
        d.engines.push_back({"sdma-" + std::to_string(e) + " (runtime-chosen)", e});
    }
    d.links.push_back(
        {"host", "pcie", engine_indices(usable_engines(pair_engines(self, kHostMemory)))});
    for (int peer = 0; peer < static_cast<int>(gpus_.size()); ++peer) {
      if (peer == self || !gpus_[peer].pool) continue;
      uint32_t hops = 0;
      if (hsa_.hsa_amd_agent_memory_pool_get_info(g.agent, *gpus_[peer].pool,
                                                  HSA_AMD_AGENT_MEMORY_POOL_INFO_NUM_LINK_HOPS,
                                                  &hops) != HSA_STATUS_SUCCESS ||
          hops == 0)
        continue;
      std::vector<hsa_amd_memory_pool_link_info_t> info(hops);
      hsa_.hsa_amd_agent_memory_pool_get_info(
          g.agent, *gpus_[peer].pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO, info.data());
      d.peer_bus_ids.push_back(gpus_[peer].bus_id);
      d.links.push_back({gpus_[peer].bus_id, link_type_name(info[0].link_type),
                         engine_indices(usable_engines(pair_engines(self, peer)))});
    }
    description_.devices.push_back(std::move(d));
  }
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
  std::vector<hsa::CopyShape> shapes;
  shapes.reserve(copies.size());
  for (const CopyRequest& c : copies) shapes.push_back({c.src_device, c.dst_device, c.bytes});
  const std::vector<hsa::PlannedPiece> pieces = planner_->plan(shapes);
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

void* HsaEngine::lock_for_gpus(void* host, uint64_t bytes, const char* what) {
  void* agent_ptr = nullptr;
  const hsa_status_t st = hsa_.hsa_amd_memory_lock(
      host, bytes, gpu_agents_.data(), static_cast<int>(gpu_agents_.size()), &agent_ptr);
  if (st != HSA_STATUS_SUCCESS)
    throw Error(ErrorCode::kEngineError, std::string("hsa_amd_memory_lock (") + what + ", " +
                                             std::to_string(bytes) +
                                             " bytes) failed: " + hsa_.describe(st));
  return agent_ptr;
}

std::shared_ptr<void> HsaEngine::prepare_host_memory(void* base, uint64_t bytes) {
  void* agent_ptr = lock_for_gpus(base, bytes, "pinning a host buffer");
  auto* host = static_cast<std::byte*>(base);
  locked_[host] = {bytes, static_cast<std::byte*>(agent_ptr)};
  return std::shared_ptr<void>(base, [this, host](void* p) {
    locked_.erase(host);
    hsa_.hsa_amd_memory_unlock(p);
  });
}

int HsaEngine::device_by_bus_id(const std::string& bus_id) const {
  const std::string wanted = lower(bus_id);
  for (std::size_t i = 0; i < gpus_.size(); ++i)
    if (gpus_[i].bus_id == wanted) return static_cast<int>(i);
  throw Error(ErrorCode::kNotFound, "no GPU with PCI bus id '" + bus_id + "' is visible to irisd");
}

void HsaEngine::check_runtime_match(const DeviceBufferExport& exported) const {
  if (exported.runtime_version == 0 || hip_behaviour_.version == 0) return;
  const hip::Behaviour client = hip::behaviour_of(static_cast<int>(exported.runtime_version));
  // ROCr 6.1 moved IPC to dma-buf (the fd travels over an abstract socket named after the
  // exporter's pid); a runtime before it and one after cannot import each other's memory.
  const bool client_dmabuf = client.version >= 60100000;
  const bool ours_dmabuf = hip_behaviour_.version >= 60100000;
  if (client_dmabuf != ours_dmabuf)
    throw Error(ErrorCode::kInvalidArgument,
                "this process runs HIP " + client.text + " and irisd HIP " + hip_behaviour_.text +
                    ": GPU memory cannot pass between ROCm before 6.1 and 6.1 or later (IPC "
                    "changed to dma-buf). Run the job on the node's ROCm (a PyTorch wheel may "
                    "bundle its own; check torch.version.hip), or irisd on the job's");
  if (client.version / 100000 != hip_behaviour_.version / 100000)
    spdlog::warn(
        "hsa engine: a client runs HIP {} and irisd HIP {}; imports work across these, "
        "but keep them one ROCm release",
        client.text, hip_behaviour_.text);
}

ImportedMemory HsaEngine::import_device_memory(const DeviceBufferExport& exported) {
  if (exported.api != DeviceApi::kHip)
    throw Error(ErrorCode::kInvalidArgument,
                "a CUDA (NVIDIA) buffer cannot be imported by the hsa engine: irisd on this node "
                "runs on AMD GPUs");
  if (hip_ == nullptr)
    throw Error(ErrorCode::kUnavailable,
                "irisd could not load the HIP runtime (libamdhip64), which imports GPU buffers: "
                "install ROCm's HIP runtime on this node and restart irisd");
  check_runtime_match(exported);
  if (!exported.vmm_fds.empty()) return import_vmm(exported, device_by_bus_id(exported.bus_id));
  if (exported.ipc_handle.size() != sizeof(hipIpcMemHandle_t))
    throw Error(ErrorCode::kInvalidArgument,
                "HIP IPC handle of " + std::to_string(exported.ipc_handle.size()) +
                    " bytes (expected " + std::to_string(sizeof(hipIpcMemHandle_t)) + ")");
  const int device = device_by_bus_id(exported.bus_id);
  std::shared_ptr<Import> opened;
  if (auto it = imports_.find(exported.ipc_handle); it != imports_.end())
    opened = it->second.lock();
  if (!opened) {
    if (gpus_[device].hip_device < 0)
      throw Error(ErrorCode::kNotFound, "the HIP runtime does not see GPU " + exported.bus_id +
                                            " (HIP_VISIBLE_DEVICES?)");
    hipError_t r = hip_->hipSetDevice(gpus_[device].hip_device);
    hipIpcMemHandle_t handle;
    std::memcpy(&handle, exported.ipc_handle.data(), sizeof(handle));
    void* base = nullptr;
    if (r == hipSuccess)
      r = hip_->hipIpcOpenMemHandle(&base, handle, hip_behaviour_.ipc_lazy_peer_access_flag);
    if (r != hipSuccess)
      throw Error(ErrorCode::kInvalidArgument,
                  "cannot import the GPU buffer (hipIpcOpenMemHandle): " + hip_->describe(r) +
                      "; the exporting process must be alive and the buffer from hipMalloc");
    hipDeviceptr_t range_base = nullptr;
    size_t size = 0;
    r = hip_->hipMemGetAddressRange(&range_base, &size, base);
    if (r != hipSuccess) {
      [[maybe_unused]] const hipError_t closed = hip_->hipIpcCloseMemHandle(base);
      throw Error(ErrorCode::kEngineError,
                  "hipMemGetAddressRange of an imported buffer failed: " + hip_->describe(r));
    }
    // Every GPU's engines may copy to or from it (the source GPU's engines run peer copies).
    const hsa_status_t st = hsa_.hsa_amd_agents_allow_access(
        static_cast<uint32_t>(gpu_agents_.size()), gpu_agents_.data(), nullptr, base);
    if (st != HSA_STATUS_SUCCESS)
      spdlog::warn("hsa engine: hsa_amd_agents_allow_access on an imported buffer: {}",
                   hsa_.describe(st));
    const hip::Runtime* hip = hip_;
    opened = std::shared_ptr<Import>(
        new Import{static_cast<std::byte*>(base), size, device}, [hip](Import* i) {
          if (const hipError_t r = hip->hipIpcCloseMemHandle(i->base); r != hipSuccess)
            spdlog::warn("hsa engine: hipIpcCloseMemHandle: {}", hip->describe(r));
          delete i;
        });
    imports_[exported.ipc_handle] = opened;
  }
  check_export_range(exported, opened->bytes, "the GPU allocation");
  for (auto it = imports_.begin(); it != imports_.end();)
    it = it->second.expired() ? imports_.erase(it) : std::next(it);
  return ImportedMemory{opened->base + exported.offset, exported.bytes, device, opened};
}

ImportedMemory HsaEngine::import_vmm(const DeviceBufferExport& exported, int device) {
  const uint64_t total = check_vmm_export(exported);
  const auto& chunks = exported.vmm_chunk_bytes;
  auto check = [this](hipError_t r, const std::string& what) {
    if (r != hipSuccess)
      throw Error(ErrorCode::kInvalidArgument, what + " failed: " + hip_->describe(r));
  };
  check(hip_->hipSetDevice(std::max(gpus_[device].hip_device, 0)), "hipSetDevice");
  struct VmmImport {
    void* base = nullptr;
    uint64_t reserved = 0;
    uint64_t mapped = 0;            // bytes mapped from base
    std::vector<uint64_t> mapping;  // each hipMemMap's size, in order
  };
  const hip::Runtime* hip = hip_;
  std::shared_ptr<VmmImport> vmm(new VmmImport, [hip](VmmImport* v) {
    // ROCr unmaps one mapping per call: unmapping the whole range at once would leave every
    // allocation after the first mapped, and the exporter's VRAM held.
    uint64_t at = 0;
    for (uint64_t bytes : v->mapping) {
      if (const hipError_t r = hip->hipMemUnmap(static_cast<std::byte*>(v->base) + at, bytes);
          r != hipSuccess)
        spdlog::warn("hsa engine: hipMemUnmap of a VMM import: {}", hip->describe(r));
      at += bytes;
    }
    if (v->base != nullptr) static_cast<void>(hip->hipMemAddressFree(v->base, v->reserved));
    delete v;
  });
  check(hip_->hipMemAddressReserve(&vmm->base, total, 0, nullptr, 0), "hipMemAddressReserve");
  vmm->reserved = total;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    hipMemGenericAllocationHandle_t handle{};
    // 6.0 to 7.0 read the fd through osHandle as a pointer; other releases take it by value.
    int fd = exported.vmm_fds[i];
    void* os_handle = hip_behaviour_.import_fd_by_pointer
                          ? static_cast<void*>(&fd)
                          : reinterpret_cast<void*>(static_cast<uintptr_t>(fd));
    check(hip_->hipMemImportFromShareableHandle(&handle, os_handle,
                                                hipMemHandleTypePosixFileDescriptor),
          "importing VMM allocation " + std::to_string(i) + " (hipMemImportFromShareableHandle)");
    const hipError_t r =
        hip_->hipMemMap(static_cast<std::byte*>(vmm->base) + vmm->mapped, chunks[i], 0, handle, 0);
    static_cast<void>(hip_->hipMemRelease(handle));  // the mapping keeps the allocation
    check(r, "mapping VMM allocation " + std::to_string(i) + " of " + std::to_string(chunks[i]) +
                 " bytes (hipMemMap)");
    vmm->mapped += chunks[i];
    vmm->mapping.push_back(chunks[i]);
  }
  // Every GPU's engines may copy to or from it (the source GPU's engines run peer copies).
  std::vector<hipMemAccessDesc> access;
  for (const Gpu& g : gpus_) {
    if (g.hip_device < 0) continue;
    hipMemAccessDesc desc{};
    desc.location.type = hipMemLocationTypeDevice;
    desc.location.id = g.hip_device;
    desc.flags = hipMemAccessFlagsProtReadWrite;
    access.push_back(desc);
  }
  check(hip_->hipMemSetAccess(vmm->base, total, access.data(), access.size()), "hipMemSetAccess");
  return ImportedMemory{static_cast<std::byte*>(vmm->base) + exported.offset, exported.bytes,
                        device, vmm};
}

int64_t HsaEngine::take_staging_word() {
  if (free_staging_.empty()) {
    void* page = std::aligned_alloc(4096, kStagingWordsPerBlock * sizeof(uint32_t));
    if (page == nullptr) throw Error(ErrorCode::kEngineError, "out of memory for flag staging");
    void* agent_ptr = nullptr;
    try {
      agent_ptr = lock_for_gpus(page, kStagingWordsPerBlock * sizeof(uint32_t), "flag staging");
    } catch (...) {
      std::free(page);
      throw;
    }
    const int64_t block = static_cast<int64_t>(staging_blocks_.size());
    staging_blocks_.push_back({static_cast<uint32_t*>(page), static_cast<uint32_t*>(agent_ptr)});
    for (std::size_t w = kStagingWordsPerBlock; w-- > 0;)
      free_staging_.push_back(block * static_cast<int64_t>(kStagingWordsPerBlock) +
                              static_cast<int64_t>(w));
  }
  const int64_t word = free_staging_.back();
  free_staging_.pop_back();
  return word;
}

void HsaEngine::write_device_word(int device, std::byte* address, uint32_t value) {
  const hsa_signal_t signal = signals_.acquire();
  int64_t word = 0;
  try {
    word = take_staging_word();
  } catch (...) {
    signals_.release(signal);
    throw;
  }
  const StagingBlock& block = staging_blocks_[word / kStagingWordsPerBlock];
  const std::size_t at = word % kStagingWordsPerBlock;
  block.host[at] = value;
  const hsa_status_t st = hsa_.hsa_amd_memory_async_copy(
      address, agent_of(device), block.agent + at, cpu_, sizeof(uint32_t), 0, nullptr, signal);
  if (st != HSA_STATUS_SUCCESS) {
    signals_.release(signal);
    free_staging_.push_back(word);
    throw Error(ErrorCode::kEngineError,
                "hsa_amd_memory_async_copy (a stream done flag): " + hsa_.describe(st));
  }
  InFlight f{signal, {0, 0, sizeof(uint32_t), device, 0}, 0, {}, deadline_for(0)};
  f.staging = word;
  in_flight_.push_back(f);
}

}  // namespace iris::daemon
