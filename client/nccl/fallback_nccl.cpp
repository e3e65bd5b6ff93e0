// Loading the fallback NCCL and calling it (fallback_nccl.hpp).
#include "client/nccl/fallback_nccl.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "client/nccl/nccl_errors.hpp"
#include "iris/shared/api_operations.hpp"

namespace iris::nccl {

namespace {

[[noreturn]] void unusable(const std::string& path, const std::string& why) {
  throw NcclError(ncclSystemError, "IRISD_NCCL_FALLBACK=" + path + ": " + why +
                                       " (point it at a real NCCL's libnccl.so.2, or unset it)");
}

template <typename F>
void resolve(void* handle, const std::string& path, const char* name, F& to, bool needed) {
  to = reinterpret_cast<F>(::dlsym(handle, name));
  if (to == nullptr && needed) unusable(path, std::string("it has no ") + name);
}

FallbackNccl load(const std::string& path, const std::bitset<kOpKindCount>& takes) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Their runtimes abort the process on a dlopen with RTLD_DEEPBIND (google/sanitizers#611).
  unusable(path, "this build of the library runs under a sanitizer, which cannot load it apart");
#endif
  // DEEPBIND: the fallback's calls to its own nccl* functions find its own, not ours.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) unusable(path, std::string("cannot load it: ") + ::dlerror());
  FallbackNccl f;
  f.path = path;
  f.takes = takes;
  ncclResult_t (*get_version)(int*) = nullptr;
  resolve(handle, path, "ncclGetVersion", get_version, true);
  // Our own ncclGetVersion answers through our symbol; the fallback's is its own.
  if (reinterpret_cast<void*>(get_version) == reinterpret_cast<void*>(&ncclGetVersion))
    unusable(path, "it is irisd's own library");
  if (get_version(&f.version) != ncclSuccess) unusable(path, "its ncclGetVersion failed");
  resolve(handle, path, "ncclGetUniqueId", f.GetUniqueId, true);
  resolve(handle, path, "ncclCommInitRank", f.CommInitRank, true);
  resolve(handle, path, "ncclCommSplit", f.CommSplit, true);
  resolve(handle, path, "ncclCommFinalize", f.CommFinalize, true);
  resolve(handle, path, "ncclCommDestroy", f.CommDestroy, true);
  resolve(handle, path, "ncclCommAbort", f.CommAbort, true);
  resolve(handle, path, "ncclCommGetAsyncError", f.CommGetAsyncError, true);
  resolve(handle, path, "ncclGetLastError", f.GetLastError, true);
  resolve(handle, path, "ncclGroupStart", f.GroupStart, true);
  resolve(handle, path, "ncclGroupEnd", f.GroupEnd, true);
  auto takes_kind = [&](OpKind k) { return takes.test(static_cast<int>(k)); };
  resolve(handle, path, "ncclAllGather", f.AllGather, takes_kind(OpKind::kAllGather));
  resolve(handle, path, "ncclAllReduce", f.AllReduce, takes_kind(OpKind::kAllReduce));
  resolve(handle, path, "ncclReduceScatter", f.ReduceScatter, takes_kind(OpKind::kReduceScatter));
  resolve(handle, path, "ncclReduce", f.Reduce, takes_kind(OpKind::kReduce));
  resolve(handle, path, "ncclBroadcast", f.Broadcast, takes_kind(OpKind::kBroadcast));
  resolve(handle, path, "ncclAlltoAll", f.AlltoAll, takes_kind(OpKind::kAlltoAll));
  resolve(handle, path, "ncclGather", f.Gather, takes_kind(OpKind::kGather));
  resolve(handle, path, "ncclScatter", f.Scatter, takes_kind(OpKind::kScatter));
  resolve(handle, path, "ncclSend", f.Send, takes_kind(OpKind::kSend));
  resolve(handle, path, "ncclRecv", f.Recv, takes_kind(OpKind::kRecv));
  if (takes_kind(OpKind::kSend) != takes_kind(OpKind::kRecv))
    unusable(path,
             "IRISD_NCCL_FALLBACK_OPS names send without recv or recv without send: a "
             "send and its receive must run on one library");
  return f;
}

}  // namespace

std::bitset<kOpKindCount> parse_fallback_ops(const std::string& list) {
  std::bitset<kOpKindCount> takes;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    if (item == "reductions") {
      for (OpKind k : {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kReduce})
        takes.set(static_cast<int>(k));
      continue;
    }
    bool known = false;
    for (std::size_t k = 0; k < kApiOperationCount; ++k)
      if (item == kApiOperationNames[k]) {
        takes.set(k);
        known = true;
      }
    if (!known)
      throw NcclError(ncclInvalidArgument,
                      "IRISD_NCCL_FALLBACK_OPS names '" + item +
                          "': name operations as iris-ctl stats does (all_reduce, "
                          "reduce_scatter, reduce, all_gather, broadcast, all_to_all, gather, "
                          "scatter, send, recv) or 'reductions'");
  }
  return takes;
}

const FallbackNccl* fallback_nccl() {
  static std::once_flag once;
  static const FallbackNccl* loaded = nullptr;
  static std::string failure;
  std::call_once(once, [] {
    const char* path = std::getenv("IRISD_NCCL_FALLBACK");
    if (path == nullptr || *path == '\0') return;
    try {
      const char* ops = std::getenv("IRISD_NCCL_FALLBACK_OPS");
      loaded = new FallbackNccl(load(path, parse_fallback_ops(ops ? ops : "reductions")));
    } catch (const NcclError& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw NcclError(ncclSystemError, failure);
  return loaded;
}

void FallbackNccl::check(ncclResult_t result, const std::string& what, ncclComm_t comm) const {
  if (result == ncclSuccess) return;
  const char* why = GetLastError(comm);
  throw NcclError(result, what + " on the fallback NCCL (" + path + ") failed" +
                              (why != nullptr && *why != '\0' ? std::string(": ") + why : ""));
}

void FallbackNccl::run(OpKind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
                       ncclRedOp_t op, int peer, ncclComm_t comm, cudaStream_t stream) const {
  ncclResult_t r = ncclInternalError;
  switch (kind) {
    case OpKind::kAllGather:
      r = AllGather(send, recv, count, type, comm, stream);
      break;
    case OpKind::kAllReduce:
      r = AllReduce(send, recv, count, type, op, comm, stream);
      break;
    case OpKind::kReduceScatter:
      r = ReduceScatter(send, recv, count, type, op, comm, stream);
      break;
    case OpKind::kReduce:
      r = Reduce(send, recv, count, type, op, peer, comm, stream);
      break;
    case OpKind::kBroadcast:
      r = Broadcast(send, recv, count, type, peer, comm, stream);
      break;
    case OpKind::kAlltoAll:
      r = AlltoAll(send, recv, count, type, comm, stream);
      break;
    case OpKind::kGather:
      r = Gather(send, recv, count, type, peer, comm, stream);
      break;
    case OpKind::kScatter:
      r = Scatter(send, recv, count, type, peer, comm, stream);
      break;
    case OpKind::kSend:
      r = Send(send, count, type, peer, comm, stream);
      break;
    case OpKind::kRecv:
      r = Recv(recv, count, type, peer, comm, stream);
      break;
  }
  check(r, op_name(kind), comm);
}

}  // namespace iris::nccl
