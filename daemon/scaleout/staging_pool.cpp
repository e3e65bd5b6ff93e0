// Reused pinned staging blocks for the data that crosses nodes (staging_pool.hpp says why).
#include "daemon/scaleout/staging_pool.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <string>

#include "iris/error.hpp"

namespace iris::daemon {

namespace {
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxBlock = uint64_t{1} << 48;  // beyond any machine; bit_ceil stays defined
// A miss pins a slab of blocks of its size class at once, up to this many bytes: a job's first
// collectives otherwise pin a block each until the other nodes release the kept copies (every
// 32 collectives).
constexpr uint64_t kSlabBytes = 256 * 1024;
}  // namespace

// One allocation, pinned once, cut into blocks of one size class; unpinned and freed when no
// block of it is out or cached any more.
struct StagingPool::Slab {
  Slab(std::byte* d, std::shared_ptr<void> p) : data(d), pin(std::move(p)) {}
  ~Slab() {
    pin.reset();  // unpinned before it is freed
    std::free(data);
  }
  std::byte* data;
  std::shared_ptr<void> pin;
};

// What the blocks handed out hold on to: the free lists outlive the pool itself while any block
// is out, and a block released after the pool is gone is dropped, not kept.
struct StagingPool::Shared {
  Shared(Engine& e, uint64_t max) : engine(e), max_cached_bytes(max) {}
  Engine& engine;
  const uint64_t max_cached_bytes;
  mutable std::mutex mutex;
  std::map<uint64_t, std::vector<Block>> free;  // by capacity
  uint64_t cached_bytes = 0;
  uint64_t pins = 0;
  bool open = true;
};

StagingPool::StagingPool(Engine& engine, uint64_t max_cached_bytes)
    : shared_(std::make_shared<Shared>(engine, max_cached_bytes)) {}

StagingPool::~StagingPool() {
  std::map<uint64_t, std::vector<Block>> free;
  {
    std::lock_guard lock(shared_->mutex);
    shared_->open = false;
    free.swap(shared_->free);
    shared_->cached_bytes = 0;
  }
}  // `free` goes here, outside the lock: slabs no block of which is out are unpinned

std::vector<StagingPool::Block> StagingPool::pin_slab(uint64_t capacity) {
  const uint64_t count = std::max<uint64_t>(1, kSlabBytes / capacity);
  auto* data = static_cast<std::byte*>(std::aligned_alloc(kPage, count * capacity));
  if (data == nullptr)
    throw Error(ErrorCode::kLimitExceeded, "cannot allocate " + std::to_string(count * capacity) +
                                               " bytes to stage another node's data");
  std::shared_ptr<void> pin;
  try {
    pin = shared_->engine.prepare_host_memory(data, count * capacity);
  } catch (...) {
    std::free(data);
    throw;
  }
  auto slab = std::make_shared<Slab>(data, std::move(pin));
  std::vector<Block> blocks;
  for (uint64_t i = 0; i < count; ++i) blocks.push_back({data + i * capacity, capacity, slab});
  return blocks;
}

std::shared_ptr<StagedData> StagingPool::take(uint64_t bytes) {
  if (bytes > kMaxBlock)
    throw Error(ErrorCode::kLimitExceeded,
                "cannot stage " + std::to_string(bytes) + " bytes of another node's data");
  const uint64_t capacity = std::bit_ceil(std::max(kPage, bytes));
  Block block;
  {
    std::lock_guard lock(shared_->mutex);
    if (auto it = shared_->free.find(capacity); it != shared_->free.end() && !it->second.empty()) {
      block = std::move(it->second.back());
      it->second.pop_back();
      shared_->cached_bytes -= capacity;
    }
  }
  if (!block.slab) {
    std::vector<Block> slab = pin_slab(capacity);
    block = std::move(slab.back());
    slab.pop_back();
    std::lock_guard lock(shared_->mutex);
    ++shared_->pins;
    // The slab's other blocks are cached whatever the bound: they are pinned already.
    for (Block& b : slab) {
      shared_->cached_bytes += capacity;
      shared_->free[capacity].push_back(std::move(b));
    }
  }
  auto* staged = new StagedData{block.data, bytes};
  return std::shared_ptr<StagedData>(staged, [shared = shared_, block](StagedData* s) mutable {
    delete s;
    {
      std::lock_guard lock(shared->mutex);
      if (shared->open && shared->cached_bytes + block.capacity <= shared->max_cached_bytes) {
        shared->cached_bytes += block.capacity;
        shared->free[block.capacity].push_back(std::move(block));
        return;
      }
    }
    block.slab.reset();  // dropped, outside the lock: a slab's last block unpins it
  });
}

uint64_t StagingPool::pins() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->pins;
}

uint64_t StagingPool::cached_bytes() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->cached_bytes;
}

}  // namespace iris::daemon
