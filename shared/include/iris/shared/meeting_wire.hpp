// The meeting point's messages: how the ranks of a job spread over nodes learn, from one node's
// irisd, every rank's node (its irisd's scale-out address) without MPI or any other service.
// Each rank sends one hello (the job's 32-byte group secret, nranks, its rank, its node's
// address); once every rank of the group has, each gets one answer with the nodes and the node of
// every rank, or an error. Both ends decode what the other sent as hostile: every length is
// checked against what is left and against a bound before anything is taken.
//
// A frame: a 4-byte little-endian length, then that many bytes: the mark "irisMEET", a 4-byte
// version, then the message.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "iris/error_code.hpp"

namespace iris::meeting {

inline constexpr uint32_t kVersion = 1;
inline constexpr std::size_t kGroupBytes = 32;
inline constexpr std::size_t kMaxAddressBytes = 4096;  // a UCX worker address is a few hundred
inline constexpr std::size_t kMaxHelloBytes = 64 + kMaxAddressBytes;
inline constexpr uint32_t kMaxRanks = 1u << 20;
inline constexpr std::size_t kMaxMessageBytes = 4096;  // an error's text

using Group = std::array<uint8_t, kGroupBytes>;

struct Hello {
  Group group{};
  uint32_t nranks = 0;
  uint32_t rank = 0;
  std::string node_address;
};

struct Answer {
  ErrorCode error = ErrorCode::kOk;
  std::string message;                 // why, when error is not kOk
  std::vector<std::string> addresses;  // by node, in order of each node's lowest rank
  std::vector<uint32_t> node_of_rank;  // by rank
};

// What taking one frame from the front of received bytes found.
enum class Take { kNeedMore, kBad, kDone };

std::string encode(const Hello& hello);
std::string encode(const Answer& answer);

// From `bytes` received so far: kDone with the message and `used` (the frame's bytes), kNeedMore,
// or kBad with `why`. `max_frame` bounds what a peer can make the caller buffer.
Take decode(std::string_view bytes, Hello& hello, std::size_t& used, std::string& why);
Take decode(std::string_view bytes, Answer& answer, std::size_t& used, std::string& why,
            std::size_t max_frame);

// The answer's bound for a job of `nranks` ranks (each rank a node with the longest address).
std::size_t max_answer_bytes(uint32_t nranks);

}  // namespace iris::meeting
