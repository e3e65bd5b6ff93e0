// The SDMA engines KFD recommends for each GPU-to-GPU link: sysfs
// <topology>/nodes/<n>/io_links/<m>/properties has `recommended_sdma_engine_id_mask` on kernels
// that know it (as ROCm/mori reads it), naming the xGMI engines wired to that link. The status
// query cannot say this: it reports the engines free at the moment.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace iris::daemon::hsa {

// (source bus id, destination bus id), lower-case "dddd:bb:dd.f", to the engine mask; pairs the
// topology gives no mask for are absent (also when the folder does not exist).
using RecommendedMasks = std::map<std::pair<std::string, std::string>, uint32_t>;
RecommendedMasks read_recommended_sdma_masks(const std::string& topology_root);

}  // namespace iris::daemon::hsa
