// KFD's GPU nodes (kfd_gpus.hpp).
#include "iris/shared/kfd_gpus.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace iris {

namespace {
namespace fs = std::filesystem;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}
}  // namespace

std::map<std::string, uint64_t> read_kfd_properties(const std::string& file) {
  std::map<std::string, uint64_t> out;
  std::ifstream in(file);
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) out[key] = value;
  return out;
}

std::vector<KfdGpu> read_kfd_gpus(const std::string& topology_root) {
  std::vector<KfdGpu> gpus;
  const fs::path nodes = fs::path(topology_root) / "nodes";
  std::error_code ec;
  if (!fs::is_directory(nodes, ec)) return gpus;
  for (const auto& node : fs::directory_iterator(nodes, ec)) {
    const std::string name = node.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit) || name.size() > 9)
      continue;
    const auto props = read_kfd_properties(node.path() / "properties");
    const auto gpu = props.find("gpu_id");
    const auto location = props.find("location_id");
    if (gpu == props.end() || gpu->second == 0 || location == props.end()) continue;
    const auto domain = props.find("domain");
    const auto version = props.find("gfx_target_version");
    const uint64_t bdf = location->second;
    char bus[40];
    std::snprintf(bus, sizeof(bus), "%04llx:%02llx:%02llx.%llx",
                  static_cast<unsigned long long>(domain != props.end() ? domain->second : 0),
                  static_cast<unsigned long long>((bdf >> 8) & 0xff),
                  static_cast<unsigned long long>((bdf >> 3) & 0x1f),
                  static_cast<unsigned long long>(bdf & 0x7));
    gpus.push_back(
        {std::stoull(name), bus, version != props.end() ? version->second : uint64_t{0}});
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const KfdGpu& a, const KfdGpu& b) { return a.node < b.node; });
  return gpus;
}

std::string gfx_target_name(uint64_t v) {
  if (v == 0) return "";
  char name[48];
  std::snprintf(name, sizeof name, "gfx%llu%llx%llx", static_cast<unsigned long long>(v / 10000),
                static_cast<unsigned long long>(v / 100 % 100),
                static_cast<unsigned long long>(v % 100));
  return name;
}

const KfdGpu* find_kfd_gpu(const std::vector<KfdGpu>& gpus, const std::string& bus_id) {
  const std::string wanted = lower(bus_id);
  for (const KfdGpu& gpu : gpus)
    if (gpu.bus_id == wanted) return &gpu;
  return nullptr;
}

}  // namespace iris
