// The process's sessions with irisd. irisd gives one session one rank of a communicator, so a
// process that holds several ranks of one (ncclCommInitAll, a thread per GPU as nccl-tests' -t)
// needs as many sessions: a "lane" is one, and a communicator takes the first lane that holds no
// rank of its key yet (a process with one rank per communicator has one lane). Also the memory
// ncclMemAlloc handed out: the first lane's session allocates it, and another lane's session
// gets it registered too on its first use there (Client::share: the same memory, no copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "iris/client.hpp"

namespace iris::nccl {

struct Lane {
  Client client;
  std::size_t index = 0;
  std::set<std::string> keys;  // communicators this lane's session holds a rank of
};

class ProcessClients {
 public:
  static ProcessClients& instance();

  // A lane holding no rank of `key`, attached now when every lane holds one (throws the attach's
  // iris::Error), with `key` taken; give it back with release().
  std::shared_ptr<Lane> take(const std::string& key);
  void release(Lane& lane, const std::string& key);
  // The meeting point of this node's irisd (empty when it has none), asked on the first lane.
  std::string meeting_point();

  // ncclMemAlloc/ncclMemFree of host memory shared with irisd (the host engine), from the first
  // lane's session.
  void* allocate_host(std::size_t bytes);
  bool free_host(void* ptr);
  // Whether `lane`'s session sees [ptr, ptr + bytes) as it is: memory from allocate_host, shared
  // with that session now if another lane's holds it (false where sharing fails: then stage it).
  bool visible_to(Lane& lane, const void* ptr, std::size_t bytes);
  // The engine irisd runs ("host", "cuda", "hsa"), attaching the first lane if none is.
  std::string engine();

 private:
  std::shared_ptr<Lane> attach_locked();
  std::mutex mutex_;
  std::vector<std::shared_ptr<Lane>> lanes_;
  struct Allocation {
    Buffer buffer;
    std::shared_ptr<Lane> lane;
    std::map<std::size_t, Buffer> shared;  // by lane index: the buffer in that lane's session
  };
  std::map<uintptr_t, Allocation> allocations_;  // by start address
};

}  // namespace iris::nccl
