// ncclUniqueId's layout (unique_id.hpp).
#include "client/nccl/unique_id.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace iris::nccl {

namespace {

constexpr char kMark[8] = {'i', 'r', 'i', 's', 'N', 'C', 'C', 'L'};
constexpr uint8_t kFormat = 2;
constexpr std::size_t kKeyAt = 12, kKeyBytes = 16;
constexpr std::size_t kSecretAt = kKeyAt + kKeyBytes, kSecretBytes = 32;
constexpr std::size_t kMeetingLengthAt = kSecretAt + kSecretBytes,
                      kMeetingAt = kMeetingLengthAt + 1;
static_assert(kMeetingAt + kMaxMeetingPointBytes <= kUniqueIdBytes);

std::string hex(const unsigned char* bytes, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

// FNV-1a over the bytes, from `seed`: two of them make the 128 bits of a derived key.
uint64_t fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

void make_unique_id(char (&id)[kUniqueIdBytes], const std::string& meeting_point) {
  if (meeting_point.size() > kMaxMeetingPointBytes)
    throw std::invalid_argument("the meeting point '" + meeting_point + "' is longer than the " +
                                std::to_string(kMaxMeetingPointBytes) +
                                " bytes an ncclUniqueId has room for: give irisd's "
                                "--meeting-address as a numeric address");
  std::memset(id, 0, sizeof id);
  std::memcpy(id, kMark, sizeof kMark);
  id[sizeof kMark] = static_cast<char>(kFormat);
  std::size_t got = 0;
  while (got < kKeyBytes + kSecretBytes) {
    const ssize_t n = ::getrandom(id + kKeyAt + got, kKeyBytes + kSecretBytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("getrandom failed: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  id[kMeetingLengthAt] = static_cast<char>(meeting_point.size());
  std::memcpy(id + kMeetingAt, meeting_point.data(), meeting_point.size());
}

std::optional<UniqueId> read_unique_id(const char (&id)[kUniqueIdBytes]) {
  if (std::memcmp(id, kMark, sizeof kMark) != 0 || id[sizeof kMark] != static_cast<char>(kFormat))
    return std::nullopt;
  const auto meeting_bytes = static_cast<unsigned char>(id[kMeetingLengthAt]);
  if (meeting_bytes > kMaxMeetingPointBytes) return std::nullopt;
  UniqueId u;
  u.key = "nccl-" + hex(reinterpret_cast<const unsigned char*>(id + kKeyAt), kKeyBytes);
  u.secret.assign(id + kSecretAt, kSecretBytes);
  u.meeting_point.assign(id + kMeetingAt, meeting_bytes);
  return u;
}

std::string derived_key(const std::string& parent, const std::string& what, uint64_t index) {
  const std::string name = parent + '/' + what + '/' + std::to_string(index);
  unsigned char digest[16];
  const uint64_t a = fnv1a(name, 0xcbf29ce484222325ull), b = fnv1a(name, 0x84222325cbf29ce4ull);
  std::memcpy(digest, &a, 8);
  std::memcpy(digest + 8, &b, 8);
  return "nccl-" + hex(digest, sizeof digest);
}

}  // namespace iris::nccl
