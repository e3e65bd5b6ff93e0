#include "daemon/operations/printable.hpp"

#include <algorithm>
#include <vector>

namespace iris::daemon {

namespace {
bool plain(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '\\'; }
}  // namespace

std::string printable(std::string_view text, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  std::vector<std::size_t> starts;  // where each input byte's text begins in `out`
  std::size_t i = 0;
  for (; i < text.size() && out.size() <= max_bytes; ++i) {
    starts.push_back(out.size());
    const auto c = static_cast<unsigned char>(text[i]);
    if (plain(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  if (i == text.size() && out.size() <= max_bytes) return out;
  // Too long: cut at a byte's boundary, leaving room for the note where it fits.
  const std::string note = "...(" + std::to_string(text.size()) + " bytes)";
  const std::size_t room = max_bytes > note.size() ? max_bytes - note.size() : 0;
  std::size_t keep = 0;
  for (std::size_t at : starts)
    if (at <= room) keep = at;
  out.resize(keep);
  if (out.size() + note.size() <= max_bytes) out += note;
  return out;
}

bool is_printable_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x20 && c < 0x7f;
  });
}

}  // namespace iris::daemon
