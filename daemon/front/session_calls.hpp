// A session's calls as they arrive on its attach connection (SessionRequest frames), carried out
// on the runtime. Untrusted bytes in, an answer out: the payload is parsed, every field checked
// by the runtime, errors answered, never thrown. Runs on the progress thread (the attach
// listener posts each call there); the fuzz target drives it directly.
#pragma once

#include <string>
#include <vector>

#include "daemon/runtime.hpp"
#include "iris/v1/attach.pb.h"

namespace iris::daemon {

struct SessionCallResult {
  v1::SessionResponse response;
  net::Fd memfd;          // allocate_host: the buffer to send with the answer
  bool detached = false;  // the session ended on the client's request
};

SessionCallResult handle_session_call(Runtime& runtime, uint64_t session_id,
                                      const std::string& payload, const std::vector<net::Fd>& fds);

}  // namespace iris::daemon
