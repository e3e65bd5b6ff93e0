// The ceiling the host engine is held to: the same copies an all-gather makes (nranks x nranks
// blocks of `bytes`, between distinct buffers) done by `threads` threads with plain memcpy.
//   iris-bench-memcpy --nranks 4 --bytes 4194304 --threads 2
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  uint64_t nranks = 4, bytes = 4 << 20, threads = 2, iterations = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const uint64_t v = std::stoull(argv[i + 1]);
    if (a == "--nranks")
      nranks = v;
    else if (a == "--bytes")
      bytes = v;
    else if (a == "--threads")
      threads = v;
    else if (a == "--iterations")
      iterations = v;
    else {
      std::fprintf(stderr, "usage: iris-bench-memcpy --nranks N --bytes B --threads T\n");
      return 2;
    }
  }
  // One send and one receive area per rank, as the ranks' shared buffers would be.
  std::vector<std::vector<char>> send(nranks, std::vector<char>(bytes, 1));
  std::vector<std::vector<char>> recv(nranks, std::vector<char>(bytes * nranks, 2));
  const uint64_t total = nranks * nranks * bytes;
  const uint64_t chunk = 1 << 20;  // the host engine's default chunk
  struct Piece {
    const char* src;
    char* dst;
    uint64_t n;
  };
  std::vector<Piece> pieces;
  for (uint64_t src = 0; src < nranks; ++src)
    for (uint64_t dst = 0; dst < nranks; ++dst)
      for (uint64_t off = 0; off < bytes; off += chunk)
        pieces.push_back({send[src].data() + off, recv[dst].data() + src * bytes + off,
                          std::min(chunk, bytes - off)});
  std::atomic<uint64_t> next{0};
  std::barrier sync(static_cast<std::ptrdiff_t>(threads + 1));
  bool stop = false;
  std::vector<std::thread> pool;
  for (uint64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (;;) {
        sync.arrive_and_wait();
        if (stop) return;
        for (uint64_t i; (i = next.fetch_add(1)) < pieces.size();)
          std::memcpy(pieces[i].dst, pieces[i].src, pieces[i].n);
        sync.arrive_and_wait();
      }
    });
  }
  std::vector<double> seconds;
  for (uint64_t i = 0; i < iterations + 2; ++i) {
    next = 0;
    const auto start = std::chrono::steady_clock::now();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    const auto end = std::chrono::steady_clock::now();
    if (i >= 2) seconds.push_back(std::chrono::duration<double>(end - start).count());
  }
  stop = true;
  sync.arrive_and_wait();
  for (auto& t : pool) t.join();
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::printf("%llu,%llu,%llu,%.3f\n", static_cast<unsigned long long>(nranks),
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(threads),
              static_cast<double>(total) / median / 1e9);
  return 0;
}
