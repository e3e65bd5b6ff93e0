// The peer a user would otherwise pick: Open MPI's MPI_Allgather, MPI_Alltoall or MPI_Bcast
// (root 0), same sizes and rank count as collective_sweep, timed the same way: a barrier, then one
// collective, whose time is that of its slowest rank (gathered after the call, outside the timed
// part); p50 and p99 over the iterations. One rank's own time would flatter a broadcast most: its
// root returns once its bytes are in shared memory, before any other rank has them. `bytes` is one
// block, as in collective_sweep.
//   mpirun -np 4 iris-bench-mpi --collective all_to_all --min-bytes 64 --max-bytes 67108864
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  uint64_t min_bytes = 64, max_bytes = 64ull << 20;
  std::string collective = "all_gather";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--min-bytes") min_bytes = std::stoull(argv[i + 1]);
    if (a == "--max-bytes") max_bytes = std::stoull(argv[i + 1]);
    if (a == "--collective") collective = argv[i + 1];
  }
  std::vector<char> send(max_bytes * nranks, static_cast<char>(rank));
  std::vector<char> recv(max_bytes * nranks);
  if (rank == 0) std::printf("nranks,bytes_per_rank,iterations,p50_us,p99_us,algbw_GBps\n");
  for (uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int iters = static_cast<int>(std::clamp<uint64_t>((256ull << 20) / bytes, 5, 200));
    const int count = static_cast<int>(bytes);
    std::vector<double> us;
    for (int i = 0; i < iters + 2; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      if (collective == "all_to_all") {
        MPI_Alltoall(send.data(), count, MPI_BYTE, recv.data(), count, MPI_BYTE, MPI_COMM_WORLD);
      } else if (collective == "broadcast") {
        MPI_Bcast(recv.data(), count, MPI_BYTE, 0, MPI_COMM_WORLD);
      } else {
        MPI_Allgather(send.data(), count, MPI_BYTE, recv.data(), count, MPI_BYTE, MPI_COMM_WORLD);
      }
      const double mine = (MPI_Wtime() - start) * 1e6;
      double slowest = 0;
      MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (i >= 2) us.push_back(slowest);
    }
    std::sort(us.begin(), us.end());
    const double out = static_cast<double>(bytes) * (collective == "broadcast" ? 1 : nranks);
    if (rank == 0)
      std::printf("%d,%llu,%d,%.2f,%.2f,%.3f\n", nranks, static_cast<unsigned long long>(bytes),
                  iters, us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)],
                  out / (us[us.size() / 2] * 1e3));
  }
  MPI_Finalize();
  return 0;
}
