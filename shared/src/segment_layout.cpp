#include "iris/shared/segment_layout.hpp"

#include <new>

#include "iris/shared/version.hpp"

namespace iris::shm {

namespace {
constexpr std::size_t align_up(std::size_t v) { return (v + kCacheLine - 1) & ~(kCacheLine - 1); }
}  // namespace

std::optional<SegmentLayout> SegmentLayout::for_depth(uint32_t depth) {
  if (!is_power_of_two(depth) || depth < 2 || depth > 65536) return std::nullopt;
  SegmentLayout l{};
  l.ring_depth = depth;
  l.ring_control_offset = align_up(sizeof(SegmentHeader));
  l.ring_entries_offset = align_up(l.ring_control_offset + sizeof(RingControl));
  l.slots_offset = align_up(l.ring_entries_offset + std::size_t{depth} * sizeof(SubmitEntry));
  const std::size_t slots = l.slot_count();
  l.flags_offset = align_up(l.slots_offset + slots * sizeof(CompletionSlot));
  l.failures_offset = align_up(l.flags_offset + slots * sizeof(StreamFlags));
  constexpr std::size_t kPage = 4096;
  const std::size_t end = l.failures_offset + slots * sizeof(FailureText);
  l.total_bytes = (end + kPage - 1) / kPage * kPage;
  return l;
}

SegmentView SegmentView::at(void* base, const SegmentLayout& layout) {
  auto* bytes = static_cast<std::byte*>(base);
  SegmentView v;
  v.header = reinterpret_cast<SegmentHeader*>(bytes);
  v.ring_control = reinterpret_cast<RingControl*>(bytes + layout.ring_control_offset);
  v.ring_entries = reinterpret_cast<SubmitEntry*>(bytes + layout.ring_entries_offset);
  v.slots = reinterpret_cast<CompletionSlot*>(bytes + layout.slots_offset);
  v.flags = reinterpret_cast<StreamFlags*>(bytes + layout.flags_offset);
  v.failures = reinterpret_cast<FailureText*>(bytes + layout.failures_offset);
  v.ring_depth = layout.ring_depth;
  return v;
}

void initialize_segment(void* base, const SegmentLayout& layout, uint64_t session_id) {
  auto* header = new (base) SegmentHeader{};
  header->magic = kSegmentMagic;
  header->version = kSegmentVersion;
  header->ring_depth = layout.ring_depth;
  header->total_bytes = layout.total_bytes;
  header->session_id = session_id;
  header->daemon_state.store(static_cast<uint32_t>(DaemonState::kRunning));
  auto view = SegmentView::at(base, layout);
  new (view.ring_control) RingControl{};
  for (uint32_t i = 0; i < layout.slot_count(); ++i) {
    new (&view.slots[i]) CompletionSlot{};
    new (&view.flags[i]) StreamFlags{};
  }
}

std::optional<SegmentView> validate_segment(void* base, std::size_t mapped_bytes) {
  if (mapped_bytes < sizeof(SegmentHeader)) return std::nullopt;
  const auto* header = static_cast<const SegmentHeader*>(base);
  if (header->magic != kSegmentMagic || header->version != kSegmentVersion) return std::nullopt;
  auto layout = SegmentLayout::for_depth(header->ring_depth);
  if (!layout || layout->total_bytes != header->total_bytes || layout->total_bytes > mapped_bytes)
    return std::nullopt;
  return SegmentView::at(base, *layout);
}

std::optional<SegmentView> adopt_segment(void* base, std::size_t mapped_bytes,
                                         const SegmentLayout& layout, uint64_t session_id) {
  auto view = validate_segment(base, mapped_bytes);
  if (!view || view->ring_depth != layout.ring_depth) return std::nullopt;
  view->header->session_id = session_id;
  view->header->daemon_needs_wakeup.store(0, std::memory_order_relaxed);
  view->header->daemon_state.store(static_cast<uint32_t>(DaemonState::kRunning),
                                   std::memory_order_release);
  return view;
}

}  // namespace iris::shm
