// A rank's arrival handed to the other nodes (scale out), and what the scheduler gets back: the
// rank's buffers are read until every transfer made for it has ended, so the rank completes only
// then. The scheduler hands its NetworkHold over with the arrival (RemoteNodes::send_arrival) and
// hears nothing until it ends: scale out splits a part from it for each transfer it starts (a
// send, a staging copy) and ends each part once; the scheduler ends its own part after the
// hand-off; the hold ends when every part has, with the first failure.
// A part dropped without end() ends nothing (a transfer abandoned while irisd stops).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "iris/error_code.hpp"

namespace iris::daemon {

// Who a hold ends to (the scheduler).
class NetworkHoldOwner {
 public:
  virtual void network_ended(uint64_t tag, ErrorCode code, const std::string& why) = 0;

 protected:
  ~NetworkHoldOwner() = default;
};

class NetworkHold {
 public:
  NetworkHold() = default;  // holds nothing
  NetworkHold(NetworkHoldOwner& owner, uint64_t tag) : part_(std::make_shared<Part>()) {
    part_->hold = std::make_shared<Shared>();
    part_->hold->owner = &owner;
    part_->hold->tag = tag;
  }

  // True while this part holds (made with an owner, not ended yet).
  explicit operator bool() const { return part_ && !part_->ended; }

  // Another part of the same hold, for a transfer that ends on its own. (A copy of a NetworkHold
  // is the same part, for callbacks that must be copyable.)
  NetworkHold split() const {
    NetworkHold part;
    if (part_ && !part_->ended) {
      ++part_->hold->parts;
      part.part_ = std::make_shared<Part>();
      part.part_->hold = part_->hold;
    }
    return part;
  }
  // This part ended; the hold ends with the last one, with the first failure of any.
  // Const: copies of a part share it, and callbacks holding one need not be mutable.
  void end(ErrorCode code = ErrorCode::kOk, const std::string& why = {}) const {
    if (!part_ || part_->ended) return;
    part_->ended = true;
    Shared& hold = *part_->hold;
    if (code != ErrorCode::kOk && hold.code == ErrorCode::kOk) {
      hold.code = code;
      hold.why = why;
    }
    if (--hold.parts == 0) hold.owner->network_ended(hold.tag, hold.code, hold.why);
  }

 private:
  struct Shared {
    NetworkHoldOwner* owner = nullptr;
    uint64_t tag = 0;
    uint32_t parts = 1;
    ErrorCode code = ErrorCode::kOk;
    std::string why;
  };
  struct Part {
    std::shared_ptr<Shared> hold;
    bool ended = false;
  };
  std::shared_ptr<Part> part_;
};

}  // namespace iris::daemon
