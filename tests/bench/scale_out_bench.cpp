// irisd across nodes against Open MPI, same ranks, same memory, same run: each MPI rank attaches
// to its node's irisd (--sockets, one per node; --node-of-rank, or ranks split evenly), joins a
// communicator across the nodes through examples/multi_node/mpi_bootstrap.hpp, then per size
// runs irisd's all-gather and all-to-all and MPI_Allgather / MPI_Alltoall on the same send data,
// checks that irisd's result equals MPI's byte for byte (exit 2 if not), and times both (barrier,
// one collective, the slowest rank's time; p50 over the iterations). Rank 0 prints a markdown
// table with the ratio. On one machine this is a sanity figure, not a network figure.
//   mpirun -np 6 iris-scale-out-bench --sockets a.sock,b.sock,c.sock --max-bytes 16777216
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iris/iris.hpp>
#include <string>
#include <vector>

#include "examples/multi_node/mpi_bootstrap.hpp"

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = list.find(',', at);
    out.push_back(list.substr(at, comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// The slowest rank's time for one call of `run`, after a barrier.
template <typename Run>
double timed(Run&& run) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  run();
  double mine = (MPI_Wtime() - start) * 1e6, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  std::vector<std::string> sockets;
  std::vector<std::string> placement;
  uint64_t min_bytes = 64, max_bytes = 1 << 20;
  int iterations = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--sockets") sockets = split(argv[i + 1]);
    if (a == "--node-of-rank") placement = split(argv[i + 1]);
    if (a == "--min-bytes") min_bytes = std::stoull(argv[i + 1]);
    if (a == "--max-bytes") max_bytes = std::stoull(argv[i + 1]);
    if (a == "--iterations") iterations = std::stoi(argv[i + 1]);
  }
  if (sockets.empty()) {
    if (rank == 0) std::fprintf(stderr, "--sockets a,b,... (one irisd per node) is required\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const uint32_t node = placement.empty() ? static_cast<uint32_t>(rank * sockets.size() / nranks)
                                          : static_cast<uint32_t>(std::stoul(placement.at(rank)));
  int status = 0;
  try {
    iris::ClientOptions options;
    options.socket_path = sockets.at(node);
    auto client = iris::Client::connect(options);
    const iris::NodeSet nodes = iris::example::nodes_from_mpi(client, MPI_COMM_WORLD, node);
    auto comm = iris::Communicator::init(client, "scale-out-bench", nranks, rank, nodes);
    const uint64_t area = max_bytes * nranks;
    auto send = client.allocate(area), recv = client.allocate(area);
    std::vector<unsigned char> expected(area);
    if (rank == 0)
      std::printf(
          "| collective | bytes/rank | irisd p50 us | MPI p50 us | irisd/MPI |\n"
          "| --- | ---: | ---: | ---: | ---: |\n");
    for (const std::string collective : {"all_gather", "all_to_all"}) {
      const bool a2a = collective == "all_to_all";
      for (uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        auto* s = send.as<unsigned char>();
        for (uint64_t i = 0; i < (a2a ? bytes * nranks : bytes); ++i)
          s[i] = static_cast<unsigned char>(rank * 131 + i * 7 + bytes);
        const int count = static_cast<int>(bytes);
        auto with_mpi = [&](void* out) {
          if (a2a)
            MPI_Alltoall(s, count, MPI_BYTE, out, count, MPI_BYTE, MPI_COMM_WORLD);
          else
            MPI_Allgather(s, count, MPI_BYTE, out, count, MPI_BYTE, MPI_COMM_WORLD);
        };
        auto with_iris = [&] {
          (a2a ? comm.all_to_all(s, recv.data(), bytes) : comm.all_gather(s, recv.data(), bytes))
              .wait();
        };
        with_mpi(expected.data());
        std::memset(recv.data(), 0xEE, area);
        with_iris();
        int bad = std::memcmp(recv.data(), expected.data(), bytes * nranks) != 0;
        int any = 0;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any != 0) {
          if (bad)
            std::fprintf(stderr, "rank %d: %s of %llu bytes differs from MPI's\n", rank,
                         collective.c_str(), static_cast<unsigned long long>(bytes));
          status = 2;
          break;
        }
        std::vector<double> iris_us, mpi_us;
        for (int i = 0; i < iterations; ++i) {
          iris_us.push_back(timed(with_iris));
          mpi_us.push_back(timed([&] { with_mpi(recv.data()); }));
        }
        if (rank == 0)
          std::printf("| %s | %llu | %.1f | %.1f | %.2f |\n", collective.c_str(),
                      static_cast<unsigned long long>(bytes), median(iris_us), median(mpi_us),
                      median(iris_us) / median(mpi_us));
      }
      if (status != 0) break;
    }
  } catch (const iris::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    status = 10 + static_cast<int>(e.code());
  }
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
