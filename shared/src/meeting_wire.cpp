// The meeting point's frames (meeting_wire.hpp).
#include "iris/shared/meeting_wire.hpp"

#include <algorithm>
#include <cstring>

namespace iris::meeting {

namespace {

constexpr char kMark[8] = {'i', 'r', 'i', 's', 'M', 'E', 'E', 'T'};

void put32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_bytes(std::string& out, std::string_view bytes) {
  put32(out, static_cast<uint32_t>(bytes.size()));
  out += bytes;
}

std::string framed(const std::string& body) {
  std::string out;
  put32(out, static_cast<uint32_t>(sizeof kMark + 4 + body.size()));
  out.append(kMark, sizeof kMark);
  put32(out, kVersion);
  out += body;
  return out;
}

// Reads a message's fields in order; any read past the end marks it bad.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}
  bool ok() const { return ok_; }
  bool at_end() const { return rest_.empty(); }
  uint32_t u32() {
    if (rest_.size() < 4) return fail();
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(rest_[i])} << (8 * i);
    rest_.remove_prefix(4);
    return v;
  }
  std::string_view bytes(std::size_t n) {
    if (rest_.size() < n) {
      fail();
      return {};
    }
    std::string_view v = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return v;
  }
  // A length-prefixed string of at most `max` bytes.
  std::string string(std::size_t max) {
    const uint32_t n = u32();
    if (!ok_ || n > max) {
      fail();
      return {};
    }
    return std::string(bytes(n));
  }

 private:
  uint32_t fail() {
    ok_ = false;
    rest_ = {};
    return 0;
  }
  std::string_view rest_;
  bool ok_ = true;
};

// The frame at the front of `bytes`: its body after the mark and version.
Take take_frame(std::string_view bytes, std::size_t max_frame, std::string_view& body,
                std::size_t& used, std::string& why) {
  if (bytes.size() < 4) return Take::kNeedMore;
  // The mark first, so that a stranger speaking another protocol is told so at once.
  const std::size_t seen = std::min<std::size_t>(bytes.size() - 4, sizeof kMark);
  if (std::memcmp(bytes.data() + 4, kMark, seen) != 0) {
    why = "not irisd's meeting protocol (no irisMEET mark)";
    return Take::kBad;
  }
  Reader header(bytes.substr(0, 4));
  const uint32_t length = header.u32();
  if (length < sizeof kMark + 4 || length > max_frame) {
    why = "a frame of " + std::to_string(length) + " bytes (at most " + std::to_string(max_frame) +
          ")";
    return Take::kBad;
  }
  if (bytes.size() < 4 + std::size_t{length}) return Take::kNeedMore;
  Reader frame(bytes.substr(4 + sizeof kMark, length - sizeof kMark));
  const uint32_t version = frame.u32();
  if (version != kVersion) {
    why = "meeting protocol version " + std::to_string(version) + ", this side speaks " +
          std::to_string(kVersion) + " (irisd and libiris of different releases?)";
    return Take::kBad;
  }
  body = bytes.substr(4 + sizeof kMark + 4, length - sizeof kMark - 4);
  used = 4 + std::size_t{length};
  return Take::kDone;
}

}  // namespace

std::string encode(const Hello& hello) {
  std::string body(reinterpret_cast<const char*>(hello.group.data()), hello.group.size());
  put32(body, hello.nranks);
  put32(body, hello.rank);
  put_bytes(body, hello.node_address);
  return framed(body);
}

std::string encode(const Answer& answer) {
  std::string body;
  put32(body, static_cast<uint32_t>(answer.error));
  if (answer.error != ErrorCode::kOk) {
    put_bytes(body, answer.message.substr(0, kMaxMessageBytes));
    return framed(body);
  }
  put32(body, static_cast<uint32_t>(answer.addresses.size()));
  for (const std::string& a : answer.addresses) put_bytes(body, a);
  put32(body, static_cast<uint32_t>(answer.node_of_rank.size()));
  for (uint32_t n : answer.node_of_rank) put32(body, n);
  return framed(body);
}

Take decode(std::string_view bytes, Hello& hello, std::size_t& used, std::string& why) {
  std::string_view body;
  const Take t = take_frame(bytes, kMaxHelloBytes, body, used, why);
  if (t != Take::kDone) return t;
  Reader r(body);
  const std::string_view group = r.bytes(kGroupBytes);
  if (r.ok()) std::memcpy(hello.group.data(), group.data(), kGroupBytes);
  hello.nranks = r.u32();
  hello.rank = r.u32();
  hello.node_address = r.string(kMaxAddressBytes);
  if (!r.ok() || !r.at_end()) {
    why = "a malformed hello";
    return Take::kBad;
  }
  if (hello.nranks < 1 || hello.nranks > kMaxRanks || hello.rank >= hello.nranks) {
    why = "rank " + std::to_string(hello.rank) + " of " + std::to_string(hello.nranks) +
          " ranks (1 to " + std::to_string(kMaxRanks) + " ranks, each below nranks)";
    return Take::kBad;
  }
  if (hello.node_address.empty()) {
    why = "a hello without its node's address";
    return Take::kBad;
  }
  return Take::kDone;
}

Take decode(std::string_view bytes, Answer& answer, std::size_t& used, std::string& why,
            std::size_t max_frame) {
  std::string_view body;
  const Take t = take_frame(bytes, max_frame, body, used, why);
  if (t != Take::kDone) return t;
  Reader r(body);
  const uint32_t code = r.u32();
  answer = Answer{};
  answer.error = static_cast<ErrorCode>(code);
  if (r.ok() && answer.error != ErrorCode::kOk) {
    answer.message = r.string(kMaxMessageBytes);
  } else if (r.ok()) {
    const uint32_t nodes = r.u32();
    for (uint32_t n = 0; r.ok() && n < nodes; ++n)
      answer.addresses.push_back(r.string(kMaxAddressBytes));
    const uint32_t ranks = r.u32();
    for (uint32_t i = 0; r.ok() && i < ranks; ++i) answer.node_of_rank.push_back(r.u32());
  }
  if (!r.ok() || !r.at_end() || code >= kErrorCodeCount) {
    why = "a malformed answer from the meeting point";
    return Take::kBad;
  }
  for (uint32_t n : answer.node_of_rank)
    if (n >= answer.addresses.size()) {
      why = "the meeting point's answer puts a rank on node " + std::to_string(n) + " of " +
            std::to_string(answer.addresses.size());
      return Take::kBad;
    }
  return Take::kDone;
}

std::size_t max_answer_bytes(uint32_t nranks) {
  return 64 + std::size_t{nranks} * (8 + kMaxAddressBytes) + kMaxMessageBytes;
}

}  // namespace iris::meeting
