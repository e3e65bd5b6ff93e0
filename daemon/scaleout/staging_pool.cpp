// Reused pinned staging blocks for the data that crosses nodes (staging_pool.hpp says why).
#include "daemon/scaleout/staging_pool.hpp"

#include <bit>
#include <cstdlib>
#include <string>

#include "iris/error.hpp"

namespace iris::daemon {

namespace {
constexpr uint64_t kPage = 4096;
constexpr uint64_t kMaxBlock = uint64_t{1}
                               << 48;  // beyond any machine's memory; bit_ceil stays defined
}  // namespace

// What the blocks handed out hold on to: the free lists outlive the pool itself while any block
// is out, and a block released after the pool is gone is freed, not kept.
struct StagingPool::Shared {
  Shared(Engine& e, uint64_t max) : engine(e), max_cached_bytes(max) {}
  Engine& engine;
  const uint64_t max_cached_bytes;
  mutable std::mutex mutex;
  std::map<uint64_t, std::vector<Block>> free;  // by capacity
  uint64_t cached_bytes = 0;
  uint64_t pinned_blocks = 0;
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
  for (auto& [capacity, blocks] : free)
    for (Block& block : blocks) free_block(block);
}

void StagingPool::free_block(Block& block) {
  block.pin.reset();  // unpinned before it is freed
  std::free(block.data);
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
  if (block.data == nullptr) {
    block.data = static_cast<std::byte*>(std::aligned_alloc(kPage, capacity));
    if (block.data == nullptr)
      throw Error(ErrorCode::kLimitExceeded, "cannot allocate " + std::to_string(capacity) +
                                                 " bytes to stage another node's data");
    block.capacity = capacity;
    try {
      block.pin = shared_->engine.prepare_host_memory(block.data, capacity);
    } catch (...) {
      std::free(block.data);
      throw;
    }
    std::lock_guard lock(shared_->mutex);
    ++shared_->pinned_blocks;
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
    free_block(block);
  });
}

uint64_t StagingPool::pinned_blocks() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->pinned_blocks;
}

uint64_t StagingPool::cached_bytes() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->cached_bytes;
}

}  // namespace iris::daemon
