// Client-supplied text made safe to show: every byte outside printable ASCII (and the backslash)
// becomes \xNN, and the result is cut at a length, so that a name or key can neither forge log
// lines, move a terminal's cursor in iris-ctl output, nor fill a disk.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace iris::daemon {

// `text` escaped, at most `max_bytes` of it (a cut one ends in "...(N bytes)").
std::string printable(std::string_view text, std::size_t max_bytes);

// True when every byte is printable ASCII (0x20-0x7e): the rule for communicator keys, which are
// matched byte for byte and so cannot be escaped.
bool is_printable_ascii(std::string_view text);

}  // namespace iris::daemon
