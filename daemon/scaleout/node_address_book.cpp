#include "daemon/scaleout/node_address_book.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

namespace iris::daemon {

namespace {
std::string to_hex(const std::string& bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

bool from_hex(const std::string& hex, std::string& out) {
  if (hex.size() % 2 != 0) return false;
  out.clear();
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + i, "%2x", &value) != 1) return false;
    out.push_back(static_cast<char>(value));
  }
  return true;
}
}  // namespace

NodeAddressBook::NodeAddressBook(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_);
  std::string line;
  std::size_t skipped = 0;
  while (std::getline(in, line) && entries_.size() < kMaxEntries) {
    std::istringstream fields(line);
    uint64_t comm = 0;
    uint32_t node = 0;
    std::string hex, address;
    if (!(fields >> std::hex >> comm >> std::dec >> node >> hex) || !from_hex(hex, address) ||
        address.empty()) {
      ++skipped;
      continue;
    }
    entries_[{comm, node}] = {next_order_++, std::move(address)};
  }
  if (skipped > 0)
    spdlog::warn("scale-out: skipped {} unreadable lines of {} (other nodes' new addresses)",
                 skipped, path_);
  if (!entries_.empty())
    spdlog::info("scale-out: {} lists {} nodes that moved since their jobs started", path_,
                 entries_.size());
}

uint64_t NodeAddressBook::name(const std::string& key, const std::string& secret) {
  // FNV-1a: the same in every build, so that an upgraded irisd reads what the previous wrote.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;  // ends each part
  };
  mix(key);
  mix(secret);
  return h;
}

void NodeAddressBook::learned(const std::string& key, const std::string& secret, uint32_t node,
                              const std::string& address) {
  entries_[{name(key, secret), node}] = {next_order_++, address};
  while (entries_.size() > kMaxEntries)
    entries_.erase(std::min_element(
        entries_.begin(), entries_.end(),
        [](const auto& a, const auto& b) { return a.second.first < b.second.first; }));
  save();
}

void NodeAddressBook::update(const std::string& key, const std::string& secret,
                             std::vector<std::string>& addresses) const {
  const uint64_t comm = name(key, secret);
  for (auto it = entries_.lower_bound({comm, 0}); it != entries_.end() && it->first.first == comm;
       ++it)
    if (it->first.second < addresses.size()) addresses[it->first.second] = it->second.second;
}

void NodeAddressBook::forget(const std::string& key, const std::string& secret) {
  const uint64_t comm = name(key, secret);
  auto first = entries_.lower_bound({comm, 0});
  auto last = first;
  while (last != entries_.end() && last->first.first == comm) ++last;
  if (first == last) return;
  entries_.erase(first, last);
  save();
}

void NodeAddressBook::save() const {
  // Written whole and renamed over the old one: a crash leaves the old file or the new.
  const std::string temporary = path_ + ".new";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    spdlog::warn(
        "scale-out: cannot write {} (other nodes' new addresses): a restart of this "
        "irisd will not find nodes that restarted before it",
        temporary);
    return;
  }
  std::string text;
  for (const auto& [where, entry] : entries_) {
    char head[64];
    std::snprintf(head, sizeof head, "%llx %u ", static_cast<unsigned long long>(where.first),
                  where.second);
    text += head + to_hex(entry.second) + "\n";
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path_.c_str()) != 0) {
    spdlog::warn("scale-out: cannot write {} (other nodes' new addresses)", path_);
    ::unlink(temporary.c_str());
  }
}

}  // namespace iris::daemon
