// A first-in-first-out queue in one vector used as a ring. std::deque allocates on construction
// and a block each time it moves past one, so a queue that is filled and drained over and over
// (the fair share's, a few times per collective) allocated on every use; this one keeps its room
// when emptied and allocates only to grow past what it held before. clear() lets go of room past
// kKeptRoom, so that a burst does not keep its memory for good.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace iris::daemon {

template <typename T>
class Fifo {
 public:
  static constexpr std::size_t kKeptRoom = 256;

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  const T& front() const { return slots_[head_]; }

  void push_back(T value) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) % slots_.size()] = std::move(value);
    ++size_;
  }
  void pop_front() {
    slots_[head_] = T{};
    head_ = (head_ + 1) % slots_.size();
    --size_;
  }
  void clear() {
    if (slots_.size() > kKeptRoom) {
      std::vector<T>().swap(slots_);
    } else {
      std::fill(slots_.begin(), slots_.end(), T{});
    }
    head_ = size_ = 0;
  }
  bool contains(const T& value) const {
    for (std::size_t i = 0; i < size_; ++i)
      if (slots_[(head_ + i) % slots_.size()] == value) return true;
    return false;
  }

 private:
  void grow() {
    std::vector<T> bigger(std::max<std::size_t>(4, 2 * slots_.size()));
    for (std::size_t i = 0; i < size_; ++i)
      bigger[i] = std::move(slots_[(head_ + i) % slots_.size()]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  std::size_t head_ = 0, size_ = 0;
};

}  // namespace iris::daemon
