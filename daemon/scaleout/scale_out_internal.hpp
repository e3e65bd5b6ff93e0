// What the parts of ScaleOut (scale_out*.cpp: membership, sending, receiving, restarts,
// liveness) share besides their state (scale_out_parts.hpp): the bounds on what other nodes and
// tenants can make irisd hold, the message envelope, and its tenant-log line. Included only by
// those files.
#pragma once

#include <cstdint>
#include <string>

#include <spdlog/spdlog.h>

#include "daemon/scaleout/scale_out.hpp"
#include "iris/v1/scaleout.pb.h"

namespace iris::daemon::scale_out_limits {

constexpr std::size_t kMaxHeaderBytes = 64 * 1024;
constexpr std::size_t kMaxPendingJoins = 1024;
constexpr std::size_t kMaxAddressBytes = 64 * 1024;
constexpr uint32_t kMaxNodes = 4096;
// Connections one irisd keeps to other nodes' daemons, over all communicators: what a tenant
// passing ever new addresses could otherwise grow without end.
constexpr std::size_t kMaxPeers = 16384;

// Compares secrets without an early exit (no timing hint of how much matched).
inline bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

inline v1::NodeMessage envelope(const Communicator& comm) {
  v1::NodeMessage m;
  m.set_key(comm.key);
  m.set_secret(comm.layout->secret);
  m.set_nranks(comm.nranks);
  return m;
}

// Collectives of one rank that a rejoining node may say completed there and never reached this
// node, looked at per rank (bounds the work a forged rejoin can cause).
constexpr uint64_t kMaxLostScan = 4096;
// Collectives a rank may arrive at out of order ahead of the oldest one not heard of yet.
constexpr std::size_t kMaxHeardAhead = 65536;
constexpr int kMaxSeqsPerDone = 512;
// Retired collectives told to the other nodes in one NodeDone while collectives flow.
constexpr std::size_t kDoneBatch = 32;
// Host data up to this size is copied for keeping on the progress thread, not the engine.
constexpr uint64_t kCopiedHereBytes = 64 * 1024;
// A node a resumed communicator could not connect to (UcxWorker::failed says so for it).
constexpr UcxWorker::PeerId kNoPeer = UINT32_MAX;

}  // namespace iris::daemon::scale_out_limits

namespace iris::daemon {

template <typename... Args>
void ScaleOutPart::warn(fmt::format_string<Args...> format, Args&&... args) {
  log_.warn(TenantLog::kOtherNodes, TenantLogKind::kScaleOut, "scale-out: {}",
            fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace iris::daemon
