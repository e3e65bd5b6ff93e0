// HsaEngine's view of the node, made once at start: the GPU agents (and which ones the operator
// named), each pair's SDMA engines (the runtime's status mask, the kernel's recommended masks on
// ROCm 7.x) and the description `iris-ctl status` shows.
#include "daemon/engines/hsa/hsa_engine.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/engines/hsa/kfd_topology.hpp"

namespace iris::daemon {

using hsa::read_recommended_sdma_masks;

namespace {
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

int HsaEngine::device_by_bus_id(const std::string& bus_id) const {
  const std::string wanted = lower(bus_id);
  for (std::size_t i = 0; i < gpus_.size(); ++i)
    if (gpus_[i].bus_id == wanted) return static_cast<int>(i);
  throw Error(ErrorCode::kNotFound, "no GPU with PCI bus id '" + bus_id + "' is visible to irisd");
}

}  // namespace iris::daemon
