// The process's lanes and host allocations (process_clients.hpp).
#include "client/nccl/process_clients.hpp"

#include <unistd.h>

#include "client/nccl/nccl_errors.hpp"

namespace iris::nccl {

ProcessClients& ProcessClients::instance() {
  // Never destroyed: communicators the program never destroys may outlive static destruction.
  static ProcessClients* clients = new ProcessClients();
  return *clients;
}

std::shared_ptr<Lane> ProcessClients::attach_locked() {
  ClientOptions options;
  options.client_name =
      "nccl pid " + std::to_string(::getpid()) + " lane " + std::to_string(lanes_.size());
  auto lane = std::make_shared<Lane>();
  lane->client = Client::connect(options);
  lane->index = lanes_.size();
  lanes_.push_back(lane);
  debug_print(DebugLevel::kInfo, "attached to irisd (engine " + lane->client.engine() +
                                     ", session " + std::to_string(lane->client.session_id()) +
                                     ") as lane " + std::to_string(lane->index));
  return lane;
}

std::shared_ptr<Lane> ProcessClients::take(const std::string& key) {
  std::lock_guard lock(mutex_);
  for (const auto& lane : lanes_)
    if (lane->keys.insert(key).second) return lane;
  auto lane = attach_locked();
  lane->keys.insert(key);
  return lane;
}

void ProcessClients::release(Lane& lane, const std::string& key) {
  std::lock_guard lock(mutex_);
  lane.keys.erase(key);
}

std::string ProcessClients::meeting_point() {
  std::lock_guard lock(mutex_);
  auto lane = lanes_.empty() ? attach_locked() : lanes_.front();
  return lane->client.meeting_point();
}

void* ProcessClients::allocate_host(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  auto lane = lanes_.empty() ? attach_locked() : lanes_.front();
  Buffer buffer = lane->client.allocate(bytes);
  void* data = buffer.data();
  allocations_.emplace(reinterpret_cast<uintptr_t>(data), Allocation{std::move(buffer), lane, {}});
  return data;
}

bool ProcessClients::free_host(void* ptr) {
  std::lock_guard lock(mutex_);
  return allocations_.erase(reinterpret_cast<uintptr_t>(ptr)) == 1;
}

bool ProcessClients::visible_to(Lane& lane, const void* ptr, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const auto at = reinterpret_cast<uintptr_t>(ptr);
  auto it = allocations_.upper_bound(at);
  if (it == allocations_.begin()) return false;
  --it;
  Allocation& allocation = it->second;
  const uintptr_t end = it->first + allocation.buffer.size();
  if (at < it->first || at > end || bytes > end - at) return false;
  if (allocation.lane.get() == &lane || allocation.shared.count(lane.index) != 0) return true;
  try {
    allocation.shared.emplace(lane.index, lane.client.share(allocation.buffer));
    return true;
  } catch (const Error& e) {
    // A limit of irisd's (the uid's host-buffer bytes count each session's registration): the
    // operation stages the memory through scratch instead.
    debug_print(DebugLevel::kInfo,
                "lane " + std::to_string(lane.index) + " stages ncclMemAlloc memory of lane " +
                    std::to_string(allocation.lane->index) + " it could not share: " + e.what());
    return false;
  }
}

std::string ProcessClients::engine() {
  std::lock_guard lock(mutex_);
  return (lanes_.empty() ? attach_locked() : lanes_.front())->client.engine();
}

}  // namespace iris::nccl
