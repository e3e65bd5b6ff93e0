// A plain HTTP/1.0 GET over loopback for tests that read /metrics or Prometheus's API (the
// product itself serves HTTP only through prometheus-cpp).
#pragma once

#include <string>

namespace iris::testing {

struct HttpResponse {
  int status = 0;  // 0 when the connection failed
  std::string body;
};

// `address`: HOST:PORT (IPv4); `target`: the path and query, already URL-encoded.
HttpResponse http_get(const std::string& address, const std::string& target);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_loopback_port();

}  // namespace iris::testing
