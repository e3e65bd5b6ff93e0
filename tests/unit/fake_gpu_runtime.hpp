// A GpuRuntime without a GPU for libiris's unit tests: allocations and physical chunks are
// tables the test fills; the stream side records what it was asked to do, in order.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "client/gpu/gpu_runtime.hpp"
#include "iris/error.hpp"

namespace iris {

class FakeGpuRuntime final : public GpuRuntime {
 public:
  FakeGpuRuntime(GpuVendor vendor, bool ipc) : vendor_(vendor), ipc_(ipc) {}
  std::map<uintptr_t, std::size_t> allocations;  // base -> bytes
  int exported = 0;
  std::vector<std::string>* calls = nullptr;  // what the stream side did, in order
  bool fail_allocation = false;
  uintptr_t next_flags = 0x900000;
  std::map<uint64_t, uint32_t> flag_values;  // what load_flag reads, by address

  GpuVendor vendor() const override { return vendor_; }
  int version() const override { return 60200000; }
  std::string bus_id_of(const void*) override { return "0000:0c:00.0"; }
  void use_context_of(const void*) override {}
  std::pair<uintptr_t, std::size_t> allocation_of(uintptr_t ptr) override {
    for (const auto& [base, bytes] : allocations)
      if (ptr >= base && ptr < base + bytes) return {base, bytes};
    throw Error(ErrorCode::kInvalidArgument, "no allocation there");
  }
  std::optional<std::string> ipc_handle(uintptr_t allocation) override {
    if (!ipc_) return std::nullopt;
    return "handle-" + std::to_string(allocation);
  }
  int export_fd(uintptr_t) override {
    ++exported;
    return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  // Physical allocations by base, for chunk_of (first-use registration); lookups counted.
  std::map<uintptr_t, GpuChunk> chunks;
  int chunk_queries = 0;
  std::optional<GpuChunk> chunk_of(uintptr_t ptr) override {
    ++chunk_queries;
    auto it = chunks.upper_bound(ptr);
    if (it == chunks.begin()) return std::nullopt;
    --it;
    if (ptr >= it->second.base + it->second.bytes) return std::nullopt;
    return it->second;
  }
  uint64_t map_host(void*, std::size_t) override {
    record("map_host");
    return 0x500000;
  }
  void unmap_host(void*) override { record("unmap_host"); }
  uint64_t allocate_flags(std::size_t bytes) override {
    if (fail_allocation) throw Error(ErrorCode::kInvalidArgument, "out of GPU memory");
    record("allocate_flags");
    allocations[next_flags] = bytes;
    return next_flags;
  }
  void free_flags(uint64_t address) override {
    record("free_flags");
    allocations.erase(address);
  }
  void store_flag(uint64_t address, uint32_t value) override {
    record("store " + std::to_string(address) + "=" + std::to_string(value));
  }
  uint32_t load_flag(uint64_t address) override {
    record("load " + std::to_string(address));
    return flag_values[address];
  }
  void copy_async(void*, void*, const void*, std::size_t bytes) override {
    record("copy " + std::to_string(bytes));
  }
  void write_value(void*, uint64_t address, uint32_t value) override {
    record("write " + std::to_string(address) + "=" + std::to_string(value));
  }
  void wait_value_geq(void*, uint64_t address, uint32_t value) override {
    record("wait " + std::to_string(address) + ">=" + std::to_string(value));
  }
  bool capturing(void*) override { return capturing_now; }
  void check_capture_supported() override {}
  void on_graph_destroyed(void*, std::function<void()> destroyed) override {
    record("graph user object");
    graph_destroyed = std::move(destroyed);
  }
  void outside_capture_rules(const std::function<void()>& f) override {
    record("relaxed {");
    try {
      f();
    } catch (...) {
      record("}");
      throw;
    }
    record("}");
  }
  bool capturing_now = false;
  std::function<void()> graph_destroyed;  // what the graph's destruction would run

 private:
  void record(const std::string& what) {
    if (calls != nullptr) calls->push_back(what);
  }
  GpuVendor vendor_;
  bool ipc_;
};

}  // namespace iris
