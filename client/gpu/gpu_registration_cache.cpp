#include "client/gpu/gpu_registration_cache.hpp"

#include <algorithm>

#include "iris/error.hpp"

namespace iris {

GpuRegistrationCache::GpuRegistrationCache(GpuRuntime& runtime, Session& session,
                                           std::size_t capacity)
    : runtime_(runtime), session_(session), capacity_(std::max<std::size_t>(capacity, 1)) {}

GpuRegistrationCache::~GpuRegistrationCache() = default;  // the session's end frees them all

std::optional<GpuRegistrationCache::Location> GpuRegistrationCache::locate(uintptr_t ptr,
                                                                           uint64_t bytes) {
  const uintptr_t end = ptr + std::max<uint64_t>(bytes, 1);
  std::lock_guard lock(mutex_);
  end_finished_retirements();
  ++tick_;
  auto it = entries_.upper_bound(ptr);
  if (it != entries_.begin() && std::prev(it)->second.end > ptr) {
    --it;
    if (!still_mapped(it->second.chunks, ptr, std::min(end, it->second.end))) {
      retire(it);  // freed, or mapped anew: what irisd imported is not this memory
      end_finished_retirements();
    } else if (end <= it->second.end) {
      Entry& e = it->second;
      e.last_used = tick_;
      ++e.held;
      return Location{e.id, ptr - e.begin, e.end - ptr, e.begin};
    }
  }
  if (!runtime_.chunk_of(ptr)) return std::nullopt;
  // New memory usually means other memory was freed: end registrations of what is gone, so
  // irisd's imports do not keep freed VRAM allocated.
  for (auto e = entries_.begin(); e != entries_.end();) {
    auto next = std::next(e);
    if (!still_mapped(e->second.chunks, e->second.begin, e->second.end)) retire(e);
    e = next;
  }
  Entry fresh = register_covering(ptr, end - ptr);
  fresh.last_used = tick_;
  fresh.held = 1;
  const Location found{fresh.id, ptr - fresh.begin, fresh.end - ptr, fresh.begin};
  entries_.emplace(fresh.begin, std::move(fresh));
  evict_beyond_capacity();
  return found;
}

GpuRegistrationCache::Entry GpuRegistrationCache::register_covering(uintptr_t ptr, uint64_t bytes) {
  // The allocations holding the range, widened to the registrations it overlaps, so that
  // tensors straddling different allocations of one VMM segment share one registration
  // instead of displacing each other.
  auto walk = [&](uintptr_t from, uintptr_t to) {
    std::vector<GpuChunk> chunks;
    for (uintptr_t at = from; at < to;) {
      const auto chunk = runtime_.chunk_of(at);
      if (!chunk || chunk->bytes == 0 || chunk->base > at) return std::vector<GpuChunk>{};
      chunks.push_back(*chunk);
      at = chunk->base + chunk->bytes;
    }
    return chunks;
  };
  std::vector<GpuChunk> chunks = walk(ptr, ptr + bytes);
  if (chunks.empty())
    throw Error(ErrorCode::kOutOfRange,
                "the GPU range of " + std::to_string(bytes) +
                    " bytes runs past the memory mapped there (a tensor's bytes beyond its "
                    "allocation?)");
  uintptr_t begin = chunks.front().base;
  uintptr_t end = chunks.back().base + chunks.back().bytes;
  if (chunks.size() == 1) {
    // Small cudaMalloc allocations share one mapping (2 MiB on current drivers), and an IPC
    // handle exports one allocation: register the allocation, not the whole mapping.
    try {
      const auto [allocation, allocation_bytes] = runtime_.allocation_of(ptr);
      if (allocation >= begin && allocation + allocation_bytes <= end &&
          ptr + bytes <= allocation + allocation_bytes) {
        begin = allocation;
        end = allocation + allocation_bytes;
      }
    } catch (const Error&) {
      // No allocation the driver can name: the mapping it is.
    }
  }
  std::vector<uintptr_t> overlapped;
  for (auto it = entries_.begin(); it != entries_.end() && it->first < end; ++it) {
    if (it->second.end <= begin) continue;
    overlapped.push_back(it->first);
  }
  if (!overlapped.empty()) {
    const uintptr_t wide_begin = std::min(begin, entries_.at(overlapped.front()).begin);
    const uintptr_t wide_end = std::max(end, entries_.at(overlapped.back()).end);
    if (auto wide = walk(wide_begin, wide_end); !wide.empty()) {
      chunks = std::move(wide);
      begin = wide_begin;
      end = wide_end;
    }
  }
  Entry e{begin, end, 0, std::move(chunks), 0, std::nullopt};
  // At irisd's per-session buffer limit, make room by ending the least recently used
  // registration no request names, and try again.
  for (bool registered = false; !registered;) {
    try {
      Session::Registration made{};
      runtime_.outside_capture_rules(
          [&] { made = session_.register_range(reinterpret_cast<void*>(begin), end - begin); });
      std::lock_guard lock(registry_mutex_);
      if (!session_.answered_by_current_irisd(made.connection)) continue;
      e.id = made.buffer_id;
      registered_[e.id] = {begin, end, e.chunks};
      registered = true;
    } catch (const Error& refused) {
      if (refused.code() != ErrorCode::kLimitExceeded || !end_least_recently_used()) throw;
    }
  }
  for (uintptr_t key : overlapped) retire(entries_.find(key));
  return e;
}

bool GpuRegistrationCache::still_mapped(const std::vector<GpuChunk>& chunks, uintptr_t begin,
                                        uintptr_t end) const {
  for (const GpuChunk& chunk : chunks) {
    if (chunk.base + chunk.bytes <= begin || chunk.base >= end) continue;
    const auto now = runtime_.chunk_of(chunk.base);
    if (!now || now->block_id != chunk.block_id || now->base != chunk.base ||
        now->bytes != chunk.bytes)
      return false;
  }
  return true;
}

bool GpuRegistrationCache::in_flight(const Entry& e) const {
  return e.held != 0 || (e.use && !session_.finished(e.use->slot, e.use->generation));
}

GpuRegistrationCache::Entry* GpuRegistrationCache::find(const Location& found) {
  if (auto it = entries_.find(found.key); it != entries_.end() && it->second.id == found.buffer_id)
    return &it->second;
  for (Entry& e : retiring_)
    if (e.id == found.buffer_id) return &e;
  return nullptr;
}

void GpuRegistrationCache::submitted(std::span<const Location> found, std::optional<Use> use) {
  std::lock_guard lock(mutex_);
  for (const Location& at : found) {
    Entry* e = find(at);
    if (e == nullptr) continue;
    if (e->held > 0) --e->held;
    if (use)
      e->use = use;
    else
      e->pinned = true;
  }
  evict_beyond_capacity();
}

void GpuRegistrationCache::not_submitted(std::span<const Location> found) {
  std::lock_guard lock(mutex_);
  for (const Location& at : found)
    if (Entry* e = find(at); e != nullptr && e->held > 0) --e->held;
  evict_beyond_capacity();
}

void GpuRegistrationCache::forget_range(uintptr_t begin, uintptr_t end) {
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.begin < end && it->second.end > begin) retire(it);
    it = next;
  }
  end_finished_retirements();
}

void GpuRegistrationCache::retire(std::map<uintptr_t, Entry>::iterator it) {
  retiring_.push_back(std::move(it->second));
  entries_.erase(it);
}

void GpuRegistrationCache::end_finished_retirements() {
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    if (in_flight(*it)) {
      ++it;
      continue;
    }
    uint64_t connection = 0;
    {
      std::lock_guard lock(registry_mutex_);
      registered_.erase(it->id);
      connection = session_.current_connection();
    }
    try {
      session_.deregister(it->id, connection);
    } catch (const Error&) {
      // The session is ending (irisd gone): its end frees the registration.
    }
    it = retiring_.erase(it);
  }
}

bool GpuRegistrationCache::end_least_recently_used() {
  auto oldest = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (!it->second.pinned && !in_flight(it->second) &&
        (oldest == entries_.end() || it->second.last_used < oldest->second.last_used))
      oldest = it;
  if (oldest == entries_.end()) return false;
  retire(oldest);
  end_finished_retirements();
  return true;
}

void GpuRegistrationCache::evict_beyond_capacity() {
  while (entries_.size() > capacity_) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (!it->second.pinned && it->second.held == 0 &&
          (oldest == entries_.end() || it->second.last_used < oldest->second.last_used))
        oldest = it;
    if (oldest == entries_.end()) return;  // all pinned or held: over capacity until they go
    retire(oldest);
  }
  end_finished_retirements();
}

std::size_t GpuRegistrationCache::registrations() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::size_t GpuRegistrationCache::retiring() const {
  std::lock_guard lock(mutex_);
  return retiring_.size();
}

HeldRegistrations::~HeldRegistrations() {
  if (cache_ != nullptr && !found_.empty()) cache_->not_submitted(found_);
}

void HeldRegistrations::submitted(std::optional<GpuRegistrationCache::Use> use) {
  if (cache_ != nullptr && !found_.empty()) cache_->submitted(found_, use);
  cache_ = nullptr;
}

void GpuRegistrationCache::for_each_registration(
    const std::function<void(uintptr_t, uintptr_t, uint64_t, bool)>& visit) const {
  std::lock_guard lock(registry_mutex_);
  for (const auto& [id, r] : registered_) {
    // The resume's thread is libiris's own, with no context: the driver's answer needs one, and
    // memory that is gone has none to give.
    bool present = true;
    try {
      runtime_.use_context_of(reinterpret_cast<void*>(r.begin));
    } catch (const Error&) {
      present = false;
    }
    visit(r.begin, r.end, id, present && still_mapped(r.chunks, r.begin, r.end));
  }
}

}  // namespace iris
