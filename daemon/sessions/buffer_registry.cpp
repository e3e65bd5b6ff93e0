#include "daemon/sessions/buffer_registry.hpp"

#include <algorithm>

#include "iris/error.hpp"
#include "iris/shared/shm_segment.hpp"

namespace iris::daemon {

BufferRegistry::BufferRegistry(const Config& config, Engine& engine, Stats& stats,
                               const SessionRegistry& sessions)
    : config_(config), engine_(engine), stats_(stats), sessions_(sessions) {}

void BufferRegistry::check_limits(const Session& s, uint64_t bytes) const {
  if (bytes == 0) throw Error(ErrorCode::kInvalidArgument, "buffer size must be at least 1 byte");
  if (bytes > config_.limits.max_buffer_bytes)
    throw Error(ErrorCode::kLimitExceeded,
                "buffer of " + std::to_string(bytes) + " bytes exceeds max_buffer_bytes (" +
                    std::to_string(config_.limits.max_buffer_bytes) + ")");
  if (s.buffers.size() >= config_.limits.max_buffers_per_session)
    throw Error(ErrorCode::kLimitExceeded,
                "session already has " + std::to_string(s.buffers.size()) +
                    " buffers (max_buffers); free some or raise --max-buffers");
}

RegisteredBuffer BufferRegistry::add(Session& s, std::shared_ptr<MappedBuffer> buffer,
                                     net::Fd memfd) {
  const uint64_t id = buffer->id;
  const uint64_t bytes = buffer->bytes;
  const bool host = buffer->device == kHostMemory;
  // take_id checked the id; a failed insert still fails the call rather than leave the id naming
  // another buffer.
  if (!s.buffers.emplace(id, std::move(buffer)).second)
    throw Error(ErrorCode::kAlreadyExists,
                "this session already has a buffer of id " + std::to_string(id));
  if (id >= s.next_buffer_id) s.next_buffer_id = id + 1;
  s.buffer_bytes += bytes;
  if (host) s.host_buffer_bytes += bytes;
  stats_.registered_buffers.fetch_add(1, std::memory_order_relaxed);
  stats_.registered_buffer_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return {id, bytes, std::move(memfd)};
}

void BufferRegistry::forget(Session& s, const MappedBuffer& buffer) {
  // Copies in flight keep the mapping or import (shared_ptr) until they end.
  s.buffer_bytes -= buffer.bytes;
  if (buffer.device == kHostMemory) s.host_buffer_bytes -= buffer.bytes;
  stats_.registered_buffers.fetch_sub(1, std::memory_order_relaxed);
  stats_.registered_buffer_bytes.fetch_sub(buffer.bytes, std::memory_order_relaxed);
}

void BufferRegistry::check_host_limits(const Session& s, uint64_t bytes) const {
  check_limits(s, bytes);
  const uint64_t held = sessions_.host_buffer_bytes_of_uid(s.peer().uid);
  if (bytes > config_.limits.max_buffer_bytes_per_uid -
                  std::min(held, config_.limits.max_buffer_bytes_per_uid))
    throw Error(ErrorCode::kLimitExceeded,
                "uid " + std::to_string(s.peer().uid) + " holds " + std::to_string(held) +
                    " bytes of host buffers; " + std::to_string(bytes) +
                    " more would pass max_buffer_bytes_per_uid (" +
                    std::to_string(config_.limits.max_buffer_bytes_per_uid) +
                    "): free buffers, or ask the operator to raise --max-buffer-bytes-per-uid");
}

uint64_t BufferRegistry::take_id(const Session& s, uint64_t resume_id) const {
  if (resume_id == 0) {
    // The session's own counter, past every id it holds (resumed ones may lie anywhere): at most
    // max_buffers steps, and never 0 (kNoBuffer), even after it wraps. add() moves the counter
    // once the buffer is in, so that a refused call changes nothing.
    uint64_t id = s.next_buffer_id;
    while (id == shm::kNoBuffer || s.buffers.count(id) != 0) ++id;
    return id;
  }
  if (!s.resumed())
    throw Error(ErrorCode::kPermissionDenied,
                "cannot register buffer " + std::to_string(resume_id) +
                    " by its id: only a session resuming after irisd restarted names its "
                    "buffers' ids (a new session is given them)");
  if (resume_id == shm::kNoBuffer || s.buffers.count(resume_id) != 0)
    throw Error(ErrorCode::kAlreadyExists, "cannot resume buffer " + std::to_string(resume_id) +
                                               ": this session already has a buffer of that id");
  return resume_id;
}

RegisteredBuffer BufferRegistry::add_host(Session& s, uint64_t id, shm::ShmSegment segment,
                                          uint64_t bytes) {
  // Declared in this order so that the engine unpins before the segment is unmapped.
  struct HostMapping {
    shm::ShmSegment segment;
    std::shared_ptr<void> pin;
  };
  auto mapping = std::make_shared<HostMapping>();
  mapping->segment = std::move(segment);
  auto* base = static_cast<std::byte*>(mapping->segment.data());
  mapping->pin = engine_.prepare_host_memory(base, bytes);
  net::Fd memfd = mapping->segment.take_fd();
  return add(
      s,
      std::make_shared<MappedBuffer>(MappedBuffer{id, s.id(), base, bytes, mapping, kHostMemory}),
      std::move(memfd));
}

RegisteredBuffer BufferRegistry::register_host(Session& s, uint64_t bytes) {
  check_host_limits(s, bytes);
  const uint64_t id = take_id(s, 0);
  // The system's refusal comes coded (a limit reached: limit_exceeded).
  shm::ShmSegment segment = shm::ShmSegment::create(
      "irisd-session-" + std::to_string(s.id()) + "-buffer-" + std::to_string(id), bytes);
  return add_host(s, id, std::move(segment), bytes);
}

RegisteredBuffer BufferRegistry::add_client_memfd(Session& s, uint64_t id, uint64_t bytes,
                                                  net::Fd memfd, const std::string& what) {
  shm::ShmSegment segment;
  try {
    segment = shm::ShmSegment::map(std::move(memfd), config_.limits.max_buffer_bytes);
  } catch (const Error& e) {
    throw Error(e.code(), "cannot " + what + ": " + e.message());
  }
  // Sealed against shrinking, so the first `bytes` stay there as long as the mapping.
  if (segment.size() < bytes)
    throw Error(ErrorCode::kInvalidArgument, "cannot " + what + " of " + std::to_string(bytes) +
                                                 " bytes: the memory sent holds " +
                                                 std::to_string(segment.size()));
  return add_host(s, id, std::move(segment), bytes);
}

void BufferRegistry::adopt_host(Session& s, uint64_t id, uint64_t bytes, net::Fd memfd) {
  check_host_limits(s, bytes);
  take_id(s, id);  // checked before anything is mapped
  add_client_memfd(s, id, bytes, std::move(memfd), "resume buffer " + std::to_string(id));
}

RegisteredBuffer BufferRegistry::share_host(Session& s, uint64_t bytes, net::Fd memfd) {
  check_host_limits(s, bytes);
  RegisteredBuffer shared =
      add_client_memfd(s, take_id(s, 0), bytes, std::move(memfd), "share host memory");
  shared.memfd = net::Fd();  // the client has it
  return shared;
}

RegisteredBuffer BufferRegistry::register_device(Session& s, const DeviceBufferExport& exported,
                                                 uint64_t resume_id) {
  check_limits(s, exported.bytes);
  // Checked before the import; the import keeps nothing when the insert fails (its keepalive).
  const uint64_t id = take_id(s, resume_id);
  ImportedMemory imported = engine_.import_device_memory(exported);
  return add(s,
             std::make_shared<MappedBuffer>(MappedBuffer{id, s.id(), imported.base, imported.bytes,
                                                         imported.keepalive, imported.device}),
             net::Fd());
}

void BufferRegistry::register_done_flags(Session& s, const DeviceBufferExport& exported) {
  const uint64_t need = (uint64_t{s.ring_depth()} + shm::kGraphPlanSlots) * sizeof(uint32_t);
  if (exported.bytes < need)
    throw Error(ErrorCode::kInvalidArgument,
                "stream done flags need " + std::to_string(need) +
                    " bytes ((ring depth + graph plan slots) x 4), got " +
                    std::to_string(exported.bytes));
  if (s.device_done_flags)
    throw Error(ErrorCode::kAlreadyExists, "this session already registered its done flags");
  s.device_done_flags = engine_.import_device_memory(exported);
}

void BufferRegistry::deregister(Session& s, uint64_t buffer_id) {
  auto it = s.buffers.find(buffer_id);
  if (it == s.buffers.end())
    throw Error(ErrorCode::kNotFound,
                "buffer " + std::to_string(buffer_id) + " is not registered by this session");
  forget(s, *it->second);
  s.buffers.erase(it);
}

void BufferRegistry::release_all(Session& s) {
  for (const auto& [id, buffer] : s.buffers) forget(s, *buffer);
  s.buffers.clear();
}

}  // namespace iris::daemon
