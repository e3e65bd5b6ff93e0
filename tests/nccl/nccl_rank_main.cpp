// One process of a job that speaks NCCL's C API, linked against irisd's libnccl.so.2, for the
// integration tests (tests/integration/nccl_api_test.cpp). Each case checks what landed against
// a reference it computes itself (every rank can compute every rank's input), prints
// "checks N" and exits 0, or prints what differs and exits 1.
//
//   iris-test-nccl-rank --socket S (--id HEX | --id-file F) --nranks N --rank R --case NAME
//                       [--stop-file F] [--count N] [--keep-comm 1]
// Cases: ops (every operation, datatype and reduction, on ncclMemAlloc and on malloc memory;
// ops-across-nodes the same with sends refused),
// staged (an all-gather of --count int32 a rank, default 1000, in ncclMemAlloc memory, then in
// malloc memory, for the tallies),
// group (operations mixed in one group), split, nonblocking, threads (every rank in this
// process: ncclCommInitAll, and a thread per rank), survivor (rank 1 dies; the others see
// ncclRemoteError with irisd's reason), abort-init (ncclCommAbort of a non-blocking init waiting
// at the meeting point for ranks that never come), loops (checked all-reduces until --stop-file
// appears, for a restart test), abort-race (ncclCommAbort while another thread waits inside an
// all-reduce, and while another thread's open group holds an operation), refusals (bad calls: their
// codes and reasons), fallback, fallback-strict and fallback-unusable (IRISD_NCCL_FALLBACK at
// tests/nccl/nccl_stand_in.cpp, or at no NCCL). --keep-comm 1: the process exits without
// destroying its communicator, as JAX does.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/nccl/element_types.hpp"
#include "client/nccl/include/nccl.h"
#include "tests/nccl/rank_checks.hpp"

namespace {

using iris::nccl::ElementType;

using namespace iris::nccl_test;

// Memory for a case: from ncclMemAlloc (irisd sees it directly) or malloc (staged).
struct Memory {
  bool nccl;
  void* get(size_t bytes) {
    void* p = nullptr;
    if (nccl) {
      NCCL_OK(ncclMemAlloc(&p, bytes));
    } else {
      p = std::malloc(bytes);
    }
    return p;
  }
  void put(void* p) {
    if (nccl)
      NCCL_OK(ncclMemFree(p));
    else
      std::free(p);
  }
};

std::size_t size_of(ElementType t) { return iris::nccl::element_bytes(t); }
bool is_float(ElementType t) {
  return t == ElementType::kFloat16 || t == ElementType::kFloat32 || t == ElementType::kFloat64 ||
         t == ElementType::kBfloat16 || t == ElementType::kFloat8e4m3 ||
         t == ElementType::kFloat8e5m2;
}

// Stores `v` (a small integer, or a quotient for avg) as an element of type t.
void put_value(ElementType t, void* base, size_t i, double v) {
  auto* p = static_cast<unsigned char*>(base) + i * size_of(t);
  auto raw = [&](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (t) {
    case ElementType::kInt8:
      return raw(static_cast<int8_t>(static_cast<int64_t>(v)));
    case ElementType::kUint8:
      return raw(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case ElementType::kInt32:
      return raw(static_cast<int32_t>(static_cast<int64_t>(v)));
    case ElementType::kUint32:
      return raw(static_cast<uint32_t>(static_cast<int64_t>(v)));
    case ElementType::kInt64:
      return raw(static_cast<int64_t>(v));
    case ElementType::kUint64:
      return raw(static_cast<uint64_t>(static_cast<int64_t>(v)));
    case ElementType::kFloat16:
      return raw(iris::nccl::float_to_half(static_cast<float>(v)));
    case ElementType::kFloat32:
      return raw(static_cast<float>(v));
    case ElementType::kFloat64:
      return raw(v);
    case ElementType::kBfloat16:
      return raw(iris::nccl::float_to_bfloat16(static_cast<float>(v)));
    case ElementType::kFloat8e4m3:
      return raw(iris::nccl::float_to_e4m3(static_cast<float>(v)));
    case ElementType::kFloat8e5m2:
      return raw(iris::nccl::float_to_e5m2(static_cast<float>(v)));
  }
}

bool same_element(ElementType t, const void* a, const void* b, size_t i) {
  return std::memcmp(static_cast<const char*>(a) + i * size_of(t),
                     static_cast<const char*>(b) + i * size_of(t), size_of(t)) == 0;
}

// Rank r's input element i for a reduction: exact in every type, and varying with i and r.
double input(int op, int r, size_t i) {
  if (op == ncclProd) return 1.0 + static_cast<double>((i + r) % 2);
  return static_cast<double>((i * 5 + r * 3) % 4);
}

double reference(int op, ElementType t, int nranks, size_t i, double scalar) {
  double acc = input(op, 0, i) * (op == ncclNumOps ? scalar : 1);
  for (int r = 1; r < nranks; ++r) {
    const double x = input(op, r, i);
    switch (op) {
      case ncclProd:
        acc *= x;
        break;
      case ncclMax:
        acc = std::max(acc, x);
        break;
      case ncclMin:
        acc = std::min(acc, x);
        break;
      case ncclNumOps:
        acc += x * scalar;
        break;  // the pre-multiplied sum
      default:
        acc += x;
    }
  }
  if (op == ncclAvg) acc = is_float(t) ? acc / nranks : std::trunc(acc / nranks);
  return acc;
}

struct Job {
  ncclComm_t comm;
  int nranks, rank;
  bool across_nodes = false;  // sends and receives are refused then
};

// The reductions (AllReduce, ReduceScatter, Reduce) for every type and op.
void check_reductions(const Job& j, Memory mem, size_t count) {
  for (int ti = 0; ti < iris::nccl::kElementTypeCount; ++ti) {
    const auto t = static_cast<ElementType>(ti);
    const auto dt = static_cast<ncclDataType_t>(ti);
    const size_t sz = size_of(t);
    for (int op = 0; op <= ncclNumOps; ++op) {  // ncclNumOps: a PreMulSum by 2
      ncclRedOp_t red = static_cast<ncclRedOp_t>(op);
      const double scalar = 2.0;
      if (op == ncclNumOps) {
        unsigned char bits[8] = {};
        put_value(t, bits, 0, scalar);
        NCCL_OK(ncclRedOpCreatePreMulSum(&red, bits, dt, ncclScalarHostImmediate, j.comm));
      }
      const std::string what =
          std::string(iris::nccl::element_name(t)) + " op " + std::to_string(op);
      const size_t all = count * j.nranks;
      char* send = static_cast<char*>(mem.get(all * sz));
      char* recv = static_cast<char*>(mem.get(all * sz));
      std::vector<char> want(all * sz);
      // All-reduce (out of place) over count elements.
      for (size_t i = 0; i < count; ++i) put_value(t, send, i, input(op, j.rank, i));
      for (size_t i = 0; i < count; ++i)
        put_value(t, want.data(), i, reference(op, t, j.nranks, i, scalar));
      NCCL_OK(ncclAllReduce(send, recv, count, dt, red, j.comm, nullptr));
      for (size_t i = 0; i < count; ++i)
        expect(same_element(t, recv, want.data(), i),
               "AllReduce " + what + " at " + std::to_string(i));
      // All-reduce in place.
      NCCL_OK(ncclAllReduce(send, send, count, dt, red, j.comm, nullptr));
      for (size_t i = 0; i < count; ++i)
        expect(same_element(t, send, want.data(), i), "AllReduce in place " + what);
      // Reduce-scatter: rank r gets the reduction of elements [r*count, (r+1)*count).
      for (size_t i = 0; i < all; ++i) put_value(t, send, i, input(op, j.rank, i));
      NCCL_OK(ncclReduceScatter(send, recv, count, dt, red, j.comm, nullptr));
      for (size_t i = 0; i < count; ++i) {
        put_value(t, want.data(), i, reference(op, t, j.nranks, j.rank * count + i, scalar));
        expect(same_element(t, recv, want.data(), i), "ReduceScatter " + what);
      }
      // Reduce to the last rank.
      const int root = j.nranks - 1;
      for (size_t i = 0; i < count; ++i) put_value(t, send, i, input(op, j.rank, i));
      NCCL_OK(ncclReduce(send, recv, count, dt, red, root, j.comm, nullptr));
      if (j.rank == root)
        for (size_t i = 0; i < count; ++i) {
          put_value(t, want.data(), i, reference(op, t, j.nranks, i, scalar));
          expect(same_element(t, recv, want.data(), i), "Reduce " + what);
        }
      mem.put(send);
      mem.put(recv);
      if (op == ncclNumOps) NCCL_OK(ncclRedOpDestroy(red, j.comm));
    }
  }
}

unsigned char pattern(int r, size_t i) { return static_cast<unsigned char>(i * 31 + r * 17 + 1); }

// The operations that only move bytes, in bytes (and once in float64, for the element sizes).
void check_moves(const Job& j, Memory mem, size_t count) {
  for (ncclDataType_t dt : {ncclUint8, ncclFloat64}) {
    const size_t sz = size_of(static_cast<ElementType>(dt));
    const size_t bytes = count * sz, all = bytes * j.nranks;
    auto* send = static_cast<unsigned char*>(mem.get(all));
    auto* recv = static_cast<unsigned char*>(mem.get(all));
    const int root = 1 % j.nranks;
    const std::string type = dt == ncclUint8 ? " uint8" : " float64";
    // AllGather, out of place and in place.
    for (size_t i = 0; i < bytes; ++i) send[i] = pattern(j.rank, i);
    NCCL_OK(ncclAllGather(send, recv, count, dt, j.comm, nullptr));
    for (int r = 0; r < j.nranks; ++r)
      for (size_t i = 0; i < bytes; i += 7)
        expect(recv[r * bytes + i] == pattern(r, i), "AllGather" + type);
    std::memset(recv, 0, all);
    for (size_t i = 0; i < bytes; ++i) recv[j.rank * bytes + i] = pattern(j.rank, i);
    NCCL_OK(ncclAllGather(recv + j.rank * bytes, recv, count, dt, j.comm, nullptr));
    for (int r = 0; r < j.nranks; ++r)
      for (size_t i = 0; i < bytes; i += 7)
        expect(recv[r * bytes + i] == pattern(r, i), "AllGather in place" + type);
    // AlltoAll: block p of rank r goes to rank p; out of place, then in place.
    for (int p = 0; p < j.nranks; ++p)
      for (size_t i = 0; i < bytes; ++i) send[p * bytes + i] = pattern(j.rank * 8 + p, i);
    NCCL_OK(ncclAlltoAll(send, recv, count, dt, j.comm, nullptr));
    for (int r = 0; r < j.nranks; ++r)
      for (size_t i = 0; i < bytes; i += 5)
        expect(recv[r * bytes + i] == pattern(r * 8 + j.rank, i), "AlltoAll" + type);
    NCCL_OK(ncclAlltoAll(send, send, count, dt, j.comm, nullptr));
    for (int r = 0; r < j.nranks; ++r)
      for (size_t i = 0; i < bytes; i += 5)
        expect(send[r * bytes + i] == pattern(r * 8 + j.rank, i), "AlltoAll in place" + type);
    // Broadcast out of place, and Bcast.
    for (size_t i = 0; i < bytes; ++i) send[i] = pattern(j.rank + 100, i);
    NCCL_OK(ncclBroadcast(send, recv, count, dt, root, j.comm, nullptr));
    for (size_t i = 0; i < bytes; i += 3)
      expect(recv[i] == pattern(root + 100, i), "Broadcast" + type);
    NCCL_OK(ncclBcast(send, count, dt, 0, j.comm, nullptr));
    for (size_t i = 0; i < bytes; i += 3) expect(send[i] == pattern(100, i), "Bcast" + type);
    // Gather to root, Scatter from root.
    for (size_t i = 0; i < bytes; ++i) send[i] = pattern(j.rank + 50, i);
    NCCL_OK(ncclGather(send, recv, count, dt, root, j.comm, nullptr));
    if (j.rank == root)
      for (int r = 0; r < j.nranks; ++r)
        for (size_t i = 0; i < bytes; i += 3)
          expect(recv[r * bytes + i] == pattern(r + 50, i), "Gather" + type);
    for (size_t i = 0; i < all; ++i) send[i] = pattern(j.rank + 70, i);
    NCCL_OK(ncclScatter(send, recv, count, dt, root, j.comm, nullptr));
    for (size_t i = 0; i < bytes; i += 3)
      expect(recv[i] == pattern(root + 70, j.rank * bytes + i), "Scatter" + type);
    // A ring of sends and receives in one group (each rank sends right, receives from left).
    const int right = (j.rank + 1) % j.nranks, left = (j.rank + j.nranks - 1) % j.nranks;
    for (size_t i = 0; i < bytes; ++i) send[i] = pattern(j.rank + 30, i);
    if (j.across_nodes) {
      expect(ncclSend(send, count, dt, right, j.comm, nullptr) == ncclInvalidUsage &&
                 std::strstr(ncclGetLastError(nullptr), "within one node") != nullptr,
             "Send across nodes refused with the reason");
    } else {
      NCCL_OK(ncclGroupStart());
      NCCL_OK(ncclSend(send, count, dt, right, j.comm, nullptr));
      NCCL_OK(ncclRecv(recv, count, dt, left, j.comm, nullptr));
      NCCL_OK(ncclGroupEnd());
      for (size_t i = 0; i < bytes; i += 3)
        expect(recv[i] == pattern(left + 30, i), "Send/Recv ring" + type);
    }
    mem.put(send);
    mem.put(recv);
  }
}

// Operations mixed in one group: an all-reduce, an all-gather, a reduce-scatter and a ring of
// sends and receives, each checked afterwards.
void check_group(const Job& j, size_t count) {
  Memory mem{true};
  const size_t all = count * j.nranks;
  auto* ar = static_cast<int32_t*>(mem.get(count * 4));
  auto* ar_out = static_cast<int32_t*>(mem.get(count * 4));
  auto* ag_in = static_cast<int32_t*>(mem.get(count * 4));
  auto* ag_out = static_cast<int32_t*>(mem.get(all * 4));
  auto* rs_in = static_cast<float*>(mem.get(all * 4));
  auto* rs_out = static_cast<float*>(mem.get(count * 4));
  auto* ring_in = static_cast<int64_t*>(mem.get(count * 8));
  auto* ring_out = static_cast<int64_t*>(mem.get(count * 8));
  for (size_t i = 0; i < count; ++i) {
    ar[i] = static_cast<int32_t>(i + j.rank);
    ag_in[i] = static_cast<int32_t>(i * 3 + j.rank);
    ring_in[i] = static_cast<int64_t>(i) * 1000 + j.rank;
  }
  for (size_t i = 0; i < all; ++i) rs_in[i] = static_cast<float>(i % 13 + j.rank);
  const int right = (j.rank + 1) % j.nranks, left = (j.rank + j.nranks - 1) % j.nranks;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(ar, ar_out, count, ncclInt32, ncclSum, j.comm, nullptr));
  NCCL_OK(ncclSend(ring_in, count, ncclInt64, right, j.comm, nullptr));
  NCCL_OK(ncclAllGather(ag_in, ag_out, count, ncclInt32, j.comm, nullptr));
  NCCL_OK(ncclReduceScatter(rs_in, rs_out, count, ncclFloat32, ncclMax, j.comm, nullptr));
  NCCL_OK(ncclRecv(ring_out, count, ncclInt64, left, j.comm, nullptr));
  NCCL_OK(ncclGroupEnd());
  const int32_t rank_sum = j.nranks * (j.nranks - 1) / 2;
  for (size_t i = 0; i < count; ++i) {
    expect(ar_out[i] == static_cast<int32_t>(i * j.nranks + rank_sum), "group AllReduce");
    expect(ring_out[i] == static_cast<int64_t>(i) * 1000 + left, "group ring");
    expect(rs_out[i] == static_cast<float>((j.rank * count + i) % 13 + j.nranks - 1),
           "group ReduceScatter");
  }
  for (int r = 0; r < j.nranks; ++r)
    for (size_t i = 0; i < count; ++i)
      expect(ag_out[r * count + i] == static_cast<int32_t>(i * 3 + r), "group AllGather");
  for (void* p : {static_cast<void*>(ar), static_cast<void*>(ar_out), static_cast<void*>(ag_in),
                  static_cast<void*>(ag_out), static_cast<void*>(rs_in), static_cast<void*>(rs_out),
                  static_cast<void*>(ring_in), static_cast<void*>(ring_out)})
    mem.put(p);
}

// The job's id: from --id, or from --id-file, which rank 0 fills from ncclGetUniqueId (written
// whole, then renamed) and the other ranks wait for (up to 60 s).
ncclUniqueId id_from_file(const std::string& path, int rank) {
  ncclUniqueId id{};
  if (rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    const std::string partial = path + ".partial";
    std::FILE* f = std::fopen(partial.c_str(), "wb");
    expect(f != nullptr && std::fwrite(id.internal, sizeof id.internal, 1, f) == 1, "id written");
    std::fclose(f);
    expect(std::rename(partial.c_str(), path.c_str()) == 0, "id file renamed into place");
    return id;
  }
  for (int i = 0; i < 6000; ++i) {
    if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
      const bool read = std::fread(id.internal, sizeof id.internal, 1, f) == 1;
      std::fclose(f);
      expect(read, "id read");
      return id;
    }
    ::usleep(10000);
  }
  expect(false, "rank 0 wrote the id file within 60 s");
  return id;
}

ncclUniqueId parse_id(const std::string& hex) {
  ncclUniqueId id{};
  for (size_t i = 0; i < sizeof id.internal && 2 * i + 1 < hex.size(); ++i)
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return id;
}

}  // namespace

namespace iris::nccl_test {

std::atomic<long> checks{0};
std::atomic<int> failures{0};

void expect(bool ok, const std::string& what) {
  ++checks;
  if (ok) return;
  if (failures++ < 20) std::printf("MISMATCH %s\n", what.c_str());
}

// A sum all-reduce of int64 on `comm`, checked: each rank contributes rank + 1 + i.
void check_sum(ncclComm_t comm, const char* what) {
  int n = 0, r = 0;
  NCCL_OK(ncclCommCount(comm, &n));
  NCCL_OK(ncclCommUserRank(comm, &r));
  constexpr size_t kCount = 1000;
  Memory mem{true};
  auto* buf = static_cast<int64_t*>(mem.get(kCount * 8));
  for (size_t i = 0; i < kCount; ++i) buf[i] = r + 1 + static_cast<int64_t>(i);
  NCCL_OK(ncclAllReduce(buf, buf, kCount, ncclInt64, ncclSum, comm, nullptr));
  for (size_t i = 0; i < kCount; ++i)
    expect(buf[i] == n * (n + 1) / 2 + n * static_cast<int64_t>(i), what);
  mem.put(buf);
}

}  // namespace iris::nccl_test

int main(int argc, char** argv) {
  std::string socket, id_hex, id_file, name = "ops", stop_file;
  int nranks = 1, rank = 0;
  size_t count = 1000;     // the staged case's elements per rank
  bool keep_comm = false;  // exit with the communicator alive (the cases that end it anyway aside)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--socket")
      socket = value;
    else if (flag == "--id")
      id_hex = value;
    else if (flag == "--id-file")
      id_file = value;
    else if (flag == "--nranks")
      nranks = std::stoi(value);
    else if (flag == "--rank")
      rank = std::stoi(value);
    else if (flag == "--case")
      name = value;
    else if (flag == "--stop-file")
      stop_file = value;
    else if (flag == "--count")
      count = std::stoul(value);
    else if (flag == "--keep-comm")
      keep_comm = value == "1";
  }
  ::setenv("IRIS_SOCKET", socket.c_str(), 1);
  const ncclUniqueId id = id_file.empty() ? parse_id(id_hex) : id_from_file(id_file, rank);
  std::setvbuf(stdout, nullptr, _IONBF, 0);

  if (name == "threads") {
    // Every rank in this process: ncclCommInitAll, one group driving them all from this thread.
    std::vector<ncclComm_t> comms(nranks);
    NCCL_OK(ncclCommInitAll(comms.data(), nranks, nullptr));
    constexpr size_t kCount = 513;
    std::vector<std::vector<int32_t>> bufs(nranks, std::vector<int32_t>(kCount));
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < kCount; ++i) bufs[r][i] = static_cast<int32_t>(r * 10 + i);
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < nranks; ++r)
      NCCL_OK(ncclAllReduce(bufs[r].data(), bufs[r].data(), kCount, ncclInt32, ncclSum, comms[r],
                            nullptr));
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < kCount; ++i)
        expect(bufs[r][i] == static_cast<int32_t>(10 * nranks * (nranks - 1) / 2 + nranks * i),
               "InitAll group AllReduce");
    // ncclMemAlloc memory comes from the first rank's session; the others' sessions get it
    // shared on first use: an in-place all-gather into one allocation per rank.
    std::vector<int32_t*> gathered(nranks);
    for (int r = 0; r < nranks; ++r)
      NCCL_OK(
          ncclMemAlloc(reinterpret_cast<void**>(&gathered[r]), kCount * nranks * sizeof(int32_t)));
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < nranks; ++r) {
      for (size_t i = 0; i < kCount; ++i)
        gathered[r][r * kCount + i] = static_cast<int32_t>(r * 1000 + i);
      NCCL_OK(ncclAllGather(gathered[r] + r * kCount, gathered[r], kCount, ncclInt32, comms[r],
                            nullptr));
    }
    NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < nranks; ++r) {
      for (int p = 0; p < nranks; ++p)
        for (size_t i = 0; i < kCount; ++i)
          expect(gathered[r][p * kCount + i] == static_cast<int32_t>(p * 1000 + i),
                 "InitAll group AllGather in ncclMemAlloc memory");
      NCCL_OK(ncclMemFree(gathered[r]));
    }
    // A thread per rank, each with its own communicator from one id.
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r)
      threads.emplace_back([&, r] {
        ncclComm_t comm;
        NCCL_OK(ncclCommInitRank(&comm, nranks, id, r));
        check_sum(comm, "thread per rank AllReduce");
        NCCL_OK(ncclCommDestroy(comm));
      });
    for (auto& t : threads) t.join();
    for (ncclComm_t c : comms) NCCL_OK(ncclCommDestroy(c));
  } else if (name == "fallback-unusable") {
    // IRISD_NCCL_FALLBACK names no usable NCCL: init fails, naming it.
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    const std::string why = ncclGetLastError(nullptr);
    std::printf("fallback refused: %s\n", why.c_str());
    expect(r != ncclSuccess && why.find("IRISD_NCCL_FALLBACK") != std::string::npos,
           "an unusable fallback fails init with the reason");
  } else if (name == "abort-init") {
    check_abort_during_init(id, nranks, rank);
  } else if (name == "nonblocking") {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t started = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    expect(started == ncclInProgress || started == ncclSuccess, "non-blocking init started");
    ncclResult_t state = ncclInProgress;
    for (int i = 0; i < 100000 && state == ncclInProgress; ++i) {
      NCCL_OK(ncclCommGetAsyncError(comm, &state));
      if (state == ncclInProgress) ::usleep(100);
    }
    expect(state == ncclSuccess, "non-blocking init completed");
    check_sum(comm, "AllReduce after non-blocking init");
    NCCL_OK(ncclCommDestroy(comm));
  } else {
    ncclComm_t comm;
    NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
    const Job job{comm, nranks, rank, name == "ops-across-nodes"};
    if (name == "ops" || name == "ops-across-nodes") {
      for (bool nccl_memory : {true, false}) {
        check_reductions(job, Memory{nccl_memory}, 1031);
        check_moves(job, Memory{nccl_memory}, 4099);
      }
    } else if (name == "staged") {
      // One out-of-place all-gather of `count` int32 per rank in ncclMemAlloc memory, then one
      // in malloc memory, which the host stages; the test compares irisd's tallies.
      for (bool nccl_memory : {true, false}) {
        Memory mem{nccl_memory};
        auto* send = static_cast<int32_t*>(mem.get(count * sizeof(int32_t)));
        auto* recv = static_cast<int32_t*>(mem.get(count * sizeof(int32_t) * nranks));
        for (size_t i = 0; i < count; ++i) send[i] = static_cast<int32_t>(rank * 7919 + i);
        NCCL_OK(ncclAllGather(send, recv, count, ncclInt32, comm, nullptr));
        for (int r = 0; r < nranks; ++r)
          for (size_t i = 0; i < count; ++i)
            expect(recv[r * count + i] == static_cast<int32_t>(r * 7919 + i),
                   nccl_memory ? "AllGather in ncclMemAlloc memory" : "AllGather staged");
        mem.put(send);
        mem.put(recv);
      }
    } else if (name == "group") {
      check_group(job, 2053);
    } else if (name == "split") {
      // Even and odd ranks apart, ordered by descending key; the last rank takes no part.
      const int color = rank == nranks - 1 ? NCCL_SPLIT_NOCOLOR : rank % 2;
      ncclComm_t half = nullptr;
      NCCL_OK(ncclCommSplit(comm, color, nranks - rank, &half, nullptr));
      if (color == NCCL_SPLIT_NOCOLOR) {
        expect(half == nullptr, "no communicator for NCCL_SPLIT_NOCOLOR");
      } else {
        int n = 0, r = 0;
        NCCL_OK(ncclCommCount(half, &n));
        NCCL_OK(ncclCommUserRank(half, &r));
        int members = 0, before = 0;
        for (int q = 0; q < nranks - 1; ++q)
          if (q % 2 == color) {
            ++members;
            if (q > rank) ++before;  // a larger parent rank has a smaller key
          }
        expect(n == members && r == before, "split size and rank");
        check_sum(half, "AllReduce on the split");
        NCCL_OK(ncclCommDestroy(half));
      }
      // Lower and upper ranks apart, in parent order: across nodes when ranks alternate.
      const int lower = (nranks + 1) / 2, part_color = rank < lower ? 0 : 1;
      ncclComm_t part = nullptr;
      NCCL_OK(ncclCommSplit(comm, part_color, rank, &part, nullptr));
      int n = 0, r = 0;
      NCCL_OK(ncclCommCount(part, &n));
      NCCL_OK(ncclCommUserRank(part, &r));
      expect(n == (part_color == 0 ? lower : nranks - lower) &&
                 r == rank - (part_color == 0 ? 0 : lower),
             "second split's size and rank");
      check_sum(part, "AllReduce on the second split");
      NCCL_OK(ncclCommDestroy(part));
      check_sum(comm, "AllReduce on the parent after the split");
    } else if (name == "survivor") {
      check_sum(comm, "AllReduce before a rank dies");
      if (rank == 1) std::_Exit(0);  // dies without destroying its communicator
      int64_t value = 1;
      const ncclResult_t r = ncclAllReduce(&value, &value, 1, ncclInt64, ncclSum, comm, nullptr);
      ncclResult_t async = ncclSuccess;
      NCCL_OK(ncclCommGetAsyncError(comm, &async));
      const std::string why = ncclGetLastError(comm);
      std::printf("survivor: %s / %s: %s\n", ncclGetErrorString(r), ncclGetErrorString(async),
                  why.c_str());
      expect(r == ncclRemoteError, "the all-reduce fails with ncclRemoteError");
      expect(why.find("peer_lost") != std::string::npos, "the reason names the lost peer");
      NCCL_OK(ncclCommAbort(comm));
      comm = nullptr;
    } else if (name == "abort-race") {
      check_abort_race(comm, rank, stop_file);
      comm = nullptr;
    } else if (name == "refusals") {
      check_refusals(comm);
    } else if (name == "fallback" || name == "fallback-strict") {
      check_fallback(comm, name == "fallback-strict");
    } else if (name == "loops") {
      // Until the stop file appears (at most a minute); every rank sees it within one
      // all-reduce of the others, so they agree on the last one by a final all-reduce of flags.
      for (int k = 0; k < 60000; ++k) {
        check_sum(comm, "AllReduce through restarts");
        int32_t stop = ::access(stop_file.c_str(), F_OK) == 0 ? 1 : 0;
        NCCL_OK(ncclAllReduce(&stop, &stop, 1, ncclInt32, ncclMax, comm, nullptr));
        if (stop != 0) break;
        ::usleep(1000);
      }
    } else {
      std::printf("unknown case %s\n", name.c_str());
      return 2;
    }
    if (comm != nullptr && !keep_comm) NCCL_OK(ncclCommDestroy(comm));
  }
  std::printf("checks %ld failures %d\n", checks.load(), failures.load());
  return failures.load() == 0 ? 0 : 1;
}
