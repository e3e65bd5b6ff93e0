// Buffer::Impl: a registered range (its id in irisd, where it is mapped here) and the session
// that registered it, which forgets the range when the last Buffer for it goes.
#pragma once

#include <memory>

#include "client/src/client_impl.hpp"

namespace iris {

struct Buffer::Impl {
  Impl(std::shared_ptr<Client::Impl> c, uint64_t i, void* d, std::size_t b,
       std::shared_ptr<shm::ShmSegment> m)
      : client(std::move(c)), id(i), data(d), bytes(b), mapping(std::move(m)) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl();

  std::shared_ptr<Client::Impl> client;
  uint64_t id;
  void* data;
  std::size_t bytes;
  std::shared_ptr<shm::ShmSegment> mapping;  // null for GPU memory the caller owns
};

}  // namespace iris
