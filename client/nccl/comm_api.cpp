// NCCL's communicator functions: ids, init (blocking and not), split, shrink, finalize, destroy,
// abort, the asynchronous error and what a communicator is.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/nccl/fallback_nccl.hpp"
#include "client/nccl/gpu_context.hpp"
#include "client/nccl/live_comms.hpp"
#include "client/nccl/nccl_comm.hpp"
#include "client/nccl/nccl_errors.hpp"
#include "client/nccl/operation_runner.hpp"
#include "client/nccl/unique_id.hpp"

using iris::nccl::check_comm;
using iris::nccl::DebugLevel;
using iris::nccl::guarded;
using iris::nccl::NcclError;

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

// What the library reads from an ncclConfig_t: the fields inside the caller's `size`.
struct Options {
  bool blocking = true;
  std::string name;
  iris::TrafficClass traffic_class = iris::TrafficClass::kAuto;
  bool shared_gpu_waits_on_host = true;
};

// IRISD_NCCL_TRAFFIC_CLASS (auto | latency | bulk): every communicator's class unless its config
// says otherwise (for programs such as PyTorch that do not expose ncclConfig_t.trafficClass).
iris::TrafficClass env_traffic_class() {
  const char* v = std::getenv("IRISD_NCCL_TRAFFIC_CLASS");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return iris::TrafficClass::kAuto;
  if (std::strcmp(v, "latency") == 0) return iris::TrafficClass::kLatency;
  if (std::strcmp(v, "bulk") == 0) return iris::TrafficClass::kBulk;
  throw NcclError(ncclInvalidArgument,
                  std::string("IRISD_NCCL_TRAFFIC_CLASS=") + v + ": auto, latency or bulk");
}

// IRISD_NCCL_SHARED_GPU (host | stream): how ranks that share a GPU wait (ncclComm).
bool env_shared_gpu_waits_on_host() {
  const char* v = std::getenv("IRISD_NCCL_SHARED_GPU");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "host") == 0) return true;
  if (std::strcmp(v, "stream") == 0) return false;
  throw NcclError(ncclInvalidArgument,
                  std::string("IRISD_NCCL_SHARED_GPU=") + v + ": host (the default) or stream");
}

bool env_blocking() {
  const char* v = std::getenv("NCCL_COMM_BLOCKING");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

Options read_config(const ncclConfig_t* config) {
  Options o;
  o.blocking = env_blocking();
  o.traffic_class = env_traffic_class();
  o.shared_gpu_waits_on_host = env_shared_gpu_waits_on_host();
  if (config == nullptr) return o;
  if (config->size < offsetof(ncclConfig_t, blocking) + sizeof(int) ||
      config->magic != kConfigMagic)
    throw NcclError(ncclInvalidArgument,
                    "the ncclConfig_t was not made with NCCL_CONFIG_INITIALIZER (size " +
                        std::to_string(config->size) + ", magic " + std::to_string(config->magic) +
                        "): initialize it with the macro");
  auto has = [&](std::size_t offset, std::size_t bytes) { return offset + bytes <= config->size; };
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) o.blocking = config->blocking != 0;
  if (has(offsetof(ncclConfig_t, commName), sizeof(const char*)) && config->commName != nullptr)
    o.name = std::string(config->commName, strnlen(config->commName, 128));
  // trafficClass, irisd's meaning: 0 auto, 1 latency, 2 bulk (the class its copies wait in while
  // users share the copy engines).
  if (has(offsetof(ncclConfig_t, trafficClass), sizeof(int)) &&
      config->trafficClass != NCCL_CONFIG_UNDEF_INT) {
    if (config->trafficClass < 0 || config->trafficClass > 2)
      throw NcclError(ncclInvalidArgument, "ncclConfig_t.trafficClass " +
                                               std::to_string(config->trafficClass) +
                                               ": irisd's classes are 0 auto, 1 latency, 2 bulk");
    o.traffic_class = static_cast<iris::TrafficClass>(config->trafficClass);
  }
  return o;
}

void check_ranks(int nranks, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    throw NcclError(ncclInvalidArgument, "rank " + std::to_string(rank) + " of nranks " +
                                             std::to_string(nranks) +
                                             ": nranks must be at least 1 and rank below it");
}

std::string fallback_names(const iris::nccl::FallbackNccl& fb) {
  std::string names;
  for (int k = 0; k < iris::nccl::kOpKindCount; ++k)
    if (fb.takes.test(k))
      names += (names.empty() ? "" : ", ") + std::string(iris::kApiOperationNames[k]);
  return names.empty() ? "nothing" : names;
}

// How long a rank waits at the meeting point for the job's other ranks.
constexpr std::chrono::minutes kMeetingTimeout{5};

// Where a new communicator's ranks find each other (ncclComm's meeting_point, secret, nodes).
struct Where {
  std::string meeting_point;
  std::string secret;
  std::optional<iris::NodeSet> nodes;
};

// The fallback NCCL's communicator of the same ranks: rank 0's id for it reaches the others
// through irisd.
void join_fallback(ncclComm& c, const iris::nccl::FallbackNccl& fb) {
  ncclUniqueId id{};
  if (c.rank == 0) fb.check(fb.GetUniqueId(&id), "ncclGetUniqueId");
  char* shared = c.host_scratch.reserve(c.lane->client, sizeof id.internal);
  std::memcpy(shared, id.internal, sizeof id.internal);
  c.comm.broadcast(shared, sizeof id.internal, 0).wait();
  std::memcpy(id.internal, shared, sizeof id.internal);
  fb.check(fb.CommInitRank(&c.fallback, static_cast<int>(c.nranks), id, static_cast<int>(c.rank)),
           "ncclCommInitRank");
}

void join(ncclComm& c) {
  if (!c.meeting_point.empty())
    c.nodes = iris::meet_nodes(c.lane->client, c.meeting_point, c.secret, c.nranks, c.rank,
                               kMeetingTimeout, &c.init_stop);
  if (c.nodes && c.nodes->addresses.size() < 2) c.nodes.reset();  // all on this node
  iris::CommOptions options;
  options.traffic_class = c.traffic_class;
  c.comm = c.nodes ? iris::Communicator::init(c.lane->client, c.key, c.nranks, c.rank, *c.nodes,
                                              options, &c.init_stop)
                   : iris::Communicator::init(c.lane->client, c.key, c.nranks, c.rank, options);
  // Every rank, whatever its engine, so that every rank's first collective is the same.
  c.start_gpu_exchange(iris::nccl::device_bus_id(c.device));
  const iris::nccl::FallbackNccl* fb = iris::nccl::fallback_nccl();
  if (fb != nullptr) join_fallback(c, *fb);
  iris::nccl::debug_print(
      DebugLevel::kInfo,
      "communicator " + c.key + " rank " + std::to_string(c.rank) + "/" + std::to_string(c.nranks) +
          " on irisd" +
          (c.nodes ? " across " + std::to_string(c.nodes->addresses.size()) + " nodes" : "") +
          " (engine " + c.lane->client.engine() + ", session " +
          std::to_string(c.lane->client.session_id()) + ", device " + std::to_string(c.device) +
          "): irisd's engine moves every operation's bytes, reductions then run on the GPU's "
          "SMs (device memory) or the host (host memory)" +
          (fb != nullptr
               ? "; the fallback NCCL " + fb->path + " (version " + std::to_string(fb->version) +
                     ") runs " + fallback_names(*fb) + " on the GPU's SMs"
               : "") +
          "; the counts follow when it ends");
  c.ready = true;
  iris::nccl::add_live_comm(&c);
}

// A communicator `key` as `rank` of `nranks`; joined now, or on a thread of its own for a
// non-blocking one.
ncclComm* make_comm(const std::string& key, int nranks, int rank, const Options& options,
                    int device, Where where) {
  auto c = std::make_unique<ncclComm>();
  c->key = key;
  c->meeting_point = std::move(where.meeting_point);
  c->secret = std::move(where.secret);
  c->nodes = std::move(where.nodes);
  c->nranks = static_cast<uint32_t>(nranks);
  c->rank = static_cast<uint32_t>(rank);
  c->device = device;
  c->blocking = options.blocking;
  c->traffic_class = options.traffic_class;
  c->shared_gpu_waits_on_host = options.shared_gpu_waits_on_host;
  c->lane = iris::nccl::ProcessClients::instance().take(key);
  if (options.blocking) {
    try {
      join(*c);
    } catch (...) {
      iris::nccl::ProcessClients::instance().release(*c->lane, key);
      throw;
    }
    return c.release();
  }
  ncclComm* raw = c.release();
  raw->init_thread = std::thread([raw, context = iris::nccl::current_context()] {
    iris::nccl::make_current(context);  // the fallback's init runs on the caller's device
    try {
      join(*raw);
    } catch (const iris::Error& e) {
      raw->fail(iris::nccl::result_of(e.code()), std::string("ncclCommInitRank: ") + e.what());
    } catch (const std::exception& e) {
      raw->fail(ncclInternalError, std::string("ncclCommInitRank: ") + e.what());
    }
  });
  return raw;
}

iris::nccl::UniqueId read_id(const ncclUniqueId& id) {
  auto read = iris::nccl::read_unique_id(id.internal);
  if (!read)
    throw NcclError(ncclInvalidArgument,
                    "the ncclUniqueId was not made by irisd's ncclGetUniqueId (a real NCCL's id, "
                    "or bytes that are no id): every rank must use the library's id");
  return *read;
}

// The nodes of a child communicator whose ranks are the parent's `members` (in the child's rank
// order); nullopt when the parent or the child lies on one node.
std::optional<iris::NodeSet> child_nodes(const ncclComm& parent,
                                         const std::vector<uint32_t>& members,
                                         const std::string& child_key) {
  if (!parent.nodes) return std::nullopt;
  iris::NodeSet nodes;
  std::map<uint32_t, uint32_t> renumbered;
  for (uint32_t r : members) {
    const uint32_t n = parent.nodes->node_of_rank[r];
    const auto [at, added] = renumbered.emplace(n, static_cast<uint32_t>(nodes.addresses.size()));
    if (added) nodes.addresses.push_back(parent.nodes->addresses[n]);
    nodes.node_of_rank.push_back(at->second);
  }
  if (nodes.addresses.size() < 2) return std::nullopt;
  nodes.secret = parent.nodes->secret + child_key;  // each child its own
  return nodes;
}

template <typename T>
void check_out(const T* out, const char* name) {
  if (out == nullptr) throw NcclError(ncclInvalidArgument, std::string(name) + " is NULL");
}

// What ncclCommCount and its kind answer: `read` of the communicator, into *out.
template <typename Read>
ncclResult_t answer(const char* function, const ncclComm* comm, int* out, const char* name,
                    Read read) {
  return guarded(function, [&] {
    check_comm(comm);
    check_out(out, name);
    *out = read(*comm);
    return ncclSuccess;
  });
}

// Ends the communicator's rank: waits for its init, ends the fallback's communicator (aborted or
// destroyed), leaves irisd's communicator (the other ranks' later operations fail with
// ncclRemoteError), frees it.
void end_comm(ncclComm* comm, bool abort) {
  if (comm->init_thread.joinable()) comm->init_thread.join();
  iris::nccl::remove_live_comm(comm);
  if (comm->fallback != nullptr) {
    const iris::nccl::FallbackNccl* fb = iris::nccl::fallback_nccl();
    if ((abort ? fb->CommAbort : fb->CommDestroy)(comm->fallback) != ncclSuccess)
      iris::nccl::debug_print(DebugLevel::kWarn,
                              std::string("the fallback NCCL's ") +
                                  (abort ? "ncclCommAbort" : "ncclCommDestroy") +
                                  " failed: " + fb->GetLastError(comm->fallback));
  }
  iris::nccl::debug_print(DebugLevel::kInfo, comm->tally_report());
  if (comm->ready) comm->report_tally(true);
  if (comm->ready) {
    try {
      comm->comm.destroy();
    } catch (const iris::Error& e) {
      iris::nccl::debug_print(DebugLevel::kWarn, std::string("ncclCommDestroy: ") + e.what());
    }
  }
  iris::nccl::release_gpu_scratch(*comm);
  iris::nccl::ProcessClients::instance().release(*comm->lane, comm->key);
  iris::nccl::CommRef::release(comm);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  return guarded("ncclGetVersion", [&] {
    check_out(version, "version");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
  });
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded("ncclGetUniqueId", [&] {
    check_out(uniqueId, "uniqueId");
    // The root's irisd's meeting point, when it has one: ranks on other nodes meet there.
    iris::nccl::make_unique_id(uniqueId->internal,
                               iris::nccl::ProcessClients::instance().meeting_point());
    return ncclSuccess;
  });
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (irisd's copy engine failed a transfer, or a CUDA call failed)";
    case ncclSystemError:
      return "unhandled system error (irisd unreachable, gone or out of resources)";
    case ncclInternalError:
      return "internal error - please report this issue to the irisd developers";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr) {
    std::lock_guard lock(comm->mutex);
    if (comm->async_error != ncclSuccess) iris::nccl::set_last_error(comm->async_message);
  }
  return iris::nccl::last_error();
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return guarded("ncclCommInitRank", [&] {
    check_out(comm, "comm");
    *comm = nullptr;
    check_ranks(nranks, rank);
    const Options options = read_config(config);
    iris::nccl::UniqueId id = read_id(commId);
    *comm = make_comm(id.key, nranks, rank, options, iris::nccl::current_device(),
                      {std::move(id.meeting_point), std::move(id.secret), std::nullopt});
    return options.blocking ? ncclSuccess : ncclInProgress;
  });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) {
    return guarded("ncclCommInitRankScalable", [&]() -> ncclResult_t {
      throw NcclError(ncclInvalidArgument, "nId must be at least 1, with that many commIds");
    });
  }
  // Every rank passes the same ids: the first names the communicator.
  return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guarded("ncclCommInitAll", [&] {
    check_out(comms, "comms");
    if (ndev < 1) throw NcclError(ncclInvalidArgument, "ndev must be at least 1");
    ncclUniqueId id;
    iris::nccl::make_unique_id(id.internal, "");  // one process: one node
    const std::string key = read_id(id).key;
    Options blocking = read_config(nullptr);  // the environment's, always blocking
    blocking.blocking = true;
    for (int i = 0; i < ndev; ++i) {
      try {
        comms[i] = make_comm(key, ndev, i, blocking, devlist != nullptr ? devlist[i] : i, {});
      } catch (...) {
        for (int j = 0; j < i; ++j) end_comm(comms[j], true);
        throw;
      }
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  return guarded("ncclCommSplit", [&] {
    iris::nccl::CommCall inside(comm, "ncclCommSplit");
    check_out(newcomm, "newcomm");
    *newcomm = nullptr;
    comm->check_usable("ncclCommSplit");
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
      throw NcclError(ncclInvalidArgument, "color must be non-negative or NCCL_SPLIT_NOCOLOR");
    const Options options = read_config(config);
    // Every rank's (color, key), gathered through irisd on the parent communicator.
    const std::size_t pair = 2 * sizeof(int32_t);
    char* table = comm->host_scratch.reserve(comm->lane->client, pair * comm->nranks);
    const int32_t mine[2] = {color, key};
    std::memcpy(table + pair * comm->rank, mine, pair);
    iris::Request gathered = comm->comm.all_gather(table + pair * comm->rank, table, pair);
    comm->wait_for(gathered);
    const uint64_t index = comm->children++;
    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    // The child's ranks: the parent's of this color, ordered by key, then by parent rank.
    std::vector<std::pair<int32_t, uint32_t>> ordered;
    for (uint32_t r = 0; r < comm->nranks; ++r) {
      int32_t theirs[2];
      std::memcpy(theirs, table + pair * r, pair);
      if (theirs[0] == color) ordered.emplace_back(theirs[1], r);
    }
    std::sort(ordered.begin(), ordered.end());
    std::vector<uint32_t> members;
    int rank = 0;
    for (const auto& [k, r] : ordered) {
      if (r == comm->rank) rank = static_cast<int>(members.size());
      members.push_back(r);
    }
    const std::string child =
        iris::nccl::derived_key(comm->key, "split-" + std::to_string(color), index);
    *newcomm = make_comm(child, static_cast<int>(members.size()), rank, options, comm->device,
                         {"", "", child_nodes(*comm, members, child)});
    return options.blocking ? ncclSuccess : ncclInProgress;
  });
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guarded("ncclCommShrink", [&] {
    iris::nccl::CommCall inside(comm, "ncclCommShrink");
    check_out(newcomm, "newcomm");
    *newcomm = nullptr;
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr))
      throw NcclError(ncclInvalidArgument, "excludeRanksCount must be 0 or more, with the list");
    std::vector<bool> excluded(comm->nranks, false);
    for (int i = 0; i < excludeRanksCount; ++i) {
      const int r = excludeRanksList[i];
      if (r < 0 || static_cast<uint32_t>(r) >= comm->nranks)
        throw NcclError(ncclInvalidArgument, "excluded rank " + std::to_string(r) +
                                                 " is not a rank of the communicator");
      excluded[r] = true;
    }
    if (excluded[comm->rank])
      throw NcclError(ncclInvalidArgument, "this rank is in its own exclude list");
    std::vector<uint32_t> members;
    int rank = 0;
    for (uint32_t r = 0; r < comm->nranks; ++r)
      if (!excluded[r]) {
        if (r == comm->rank) rank = static_cast<int>(members.size());
        members.push_back(r);
      }
    // No exchange: the ranks that remain pass the same list, so they name the same child.
    const std::string child = iris::nccl::derived_key(comm->key, "shrink", comm->children++);
    const Options options = read_config(config);
    *newcomm = make_comm(child, static_cast<int>(members.size()), rank, options, comm->device,
                         {"", "", child_nodes(*comm, members, child)});
    return options.blocking ? ncclSuccess : ncclInProgress;
  });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guarded("ncclCommFinalize", [&] {
    iris::nccl::CommCall inside(comm, "ncclCommFinalize");
    if (comm->init_thread.joinable()) comm->init_thread.join();
    std::vector<iris::Request> in_flight;
    {
      std::lock_guard lock(comm->mutex);
      in_flight.swap(comm->in_flight);
    }
    for (iris::Request& r : in_flight) {
      try {
        comm->wait_for(r);
      } catch (const iris::Error& e) {
        comm->fail(iris::nccl::result_of(e.code()), e.what());
      }
    }
    if (comm->fallback != nullptr) {
      const iris::nccl::FallbackNccl* fb = iris::nccl::fallback_nccl();
      fb->check(fb->CommFinalize(comm->fallback), "ncclCommFinalize", comm->fallback);
    }
    return ncclSuccess;
  });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guarded("ncclCommDestroy", [&] {
    if (comm == nullptr) return ncclSuccess;
    ncclCommFinalize(comm);
    end_comm(comm, false);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guarded("ncclCommAbort", [&] {
    if (comm == nullptr) return ncclSuccess;
    // Calls inside it on other threads leave first (a host wait sees the abort within
    // ncclComm::kAbortPoll); this thread's open group drops what it queued on it.
    iris::nccl::drop_group_operations(comm);
    comm->init_stop = true;  // a non-blocking init waiting for other nodes ends now
    comm->stop_calls();
    end_comm(comm, true);
    return ncclSuccess;
  });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded("ncclCommGetAsyncError", [&] {
    iris::nccl::CommCall inside(comm, "ncclCommGetAsyncError");
    check_out(asyncError, "asyncError");
    *asyncError = comm->poll();
    return ncclSuccess;
  });
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return answer("ncclCommCount", comm, count, "count",
                [](const ncclComm& c) { return static_cast<int>(c.nranks); });
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return answer("ncclCommCuDevice", comm, device, "device",
                [](const ncclComm& c) { return c.device; });
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return answer("ncclCommUserRank", comm, rank, "rank",
                [](const ncclComm& c) { return static_cast<int>(c.rank); });
}

}  // extern "C"
