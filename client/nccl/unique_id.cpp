// ncclUniqueId's layout (unique_id.hpp).
#include "client/nccl/unique_id.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace iris::nccl {

namespace {

constexpr char kMark[8] = {'i', 'r', 'i', 's', 'N', 'C', 'C', 'L'};
constexpr uint8_t kFormat = 1;
constexpr std::size_t kRandomAt = 12, kRandomBytes = 16;

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

void make_unique_id(char (&id)[kUniqueIdBytes]) {
  std::memset(id, 0, sizeof id);
  std::memcpy(id, kMark, sizeof kMark);
  id[sizeof kMark] = static_cast<char>(kFormat);
  std::size_t got = 0;
  while (got < kRandomBytes) {
    const ssize_t n = ::getrandom(id + kRandomAt + got, kRandomBytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("getrandom failed: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
}

std::optional<std::string> key_of_unique_id(const char (&id)[kUniqueIdBytes]) {
  if (std::memcmp(id, kMark, sizeof kMark) != 0 || id[sizeof kMark] != static_cast<char>(kFormat))
    return std::nullopt;
  return "nccl-" + hex(reinterpret_cast<const unsigned char*>(id + kRandomAt), kRandomBytes);
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
