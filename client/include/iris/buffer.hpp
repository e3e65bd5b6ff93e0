// Host memory shared with irisd: allocated and registered by Client::allocate. Copies of a Buffer
// share one registration; the last one to go deregisters it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace iris {

class Buffer {
 public:
  struct Impl;
  Buffer();
  explicit Buffer(std::shared_ptr<Impl> impl);

  void* data() const;
  std::size_t size() const;
  uint64_t id() const;  // the daemon's buffer id
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }

 private:
  friend class Client;  // Client::share reads the memory behind another client's Buffer
  std::shared_ptr<Impl> impl_;
};

}  // namespace iris
