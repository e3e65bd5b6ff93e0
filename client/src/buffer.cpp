#include "iris/buffer.hpp"

#include "client/src/buffer_impl.hpp"
#include "client/src/process_id.hpp"

#include <unistd.h>

namespace iris {

Buffer::Impl::~Impl() {
  if (client->link->owned_here()) client->registrations->forget(id, data);
}

Buffer::Buffer() = default;
Buffer::Buffer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

void* Buffer::data() const { return impl_ ? impl_->data : nullptr; }
std::size_t Buffer::size() const { return impl_ ? impl_->bytes : 0; }
uint64_t Buffer::id() const { return impl_ ? impl_->id : 0; }

}  // namespace iris
