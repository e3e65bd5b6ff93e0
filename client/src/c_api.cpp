// The C interface (iris/iris.h) over the C++ client: each call catches iris::Error and returns its
// code, keeping the message for iris_last_error().
#include "iris/iris.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "iris/iris.hpp"

struct iris_client {
  iris::Client client;
};
struct iris_buffer {
  iris::Buffer buffer;
};
struct iris_comm {
  iris::Communicator comm;
};
struct iris_request {
  iris::Request request;
};

namespace {

thread_local std::string last_error;

// Runs `body`, turning an exception into an error code and a message.
template <typename Body>
int guarded(Body&& body) {
  try {
    body();
    return IRIS_OK;
  } catch (const iris::Error& e) {
    last_error = e.message();  // iris_error_name() gives the code's name
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    last_error = e.what();
    return IRIS_ERROR_INTERNAL;
  }
}

int null_argument(const char* what) {
  last_error = std::string(what) + " is NULL";
  return IRIS_ERROR_INVALID_ARGUMENT;
}

// The C stream description as the C++ API's Stream; nullopt (with last_error set) when its kind
// is unknown.
std::optional<iris::Stream> to_stream(const iris_stream* stream) {
  if (stream == nullptr) return iris::Stream{};
  if (stream->kind == IRIS_STREAM_CUDA)
    return iris::Stream{static_cast<CUstream_st*>(stream->handle)};
  if (stream->kind == IRIS_STREAM_HIP)
    return iris::Stream{static_cast<ihipStream_t*>(stream->handle)};
  last_error = "unknown iris_stream kind " + std::to_string(stream->kind) +
               " (IRIS_STREAM_CUDA or IRIS_STREAM_HIP)";
  return std::nullopt;
}

// Submits a collective through `call(communicator, stream)` and hands out its request.
template <typename Call>
int submitted(iris_comm* comm, const iris_stream* stream, iris_request** out, Call&& call) {
  if (comm == nullptr || out == nullptr) return null_argument(comm ? "out" : "comm");
  const auto on = to_stream(stream);
  if (!on) return IRIS_ERROR_INVALID_ARGUMENT;
  return guarded([&] { *out = new iris_request{call(comm->comm, *on)}; });
}

}  // namespace

static_assert(IRIS_ERROR_CANCELLED + 1 == iris::kErrorCodeCount,
              "iris.h must name every iris::ErrorCode");

extern "C" {

const char* iris_last_error(void) { return last_error.c_str(); }

const char* iris_error_name(int code) {
  if (code < 0 || static_cast<uint32_t>(code) >= iris::kErrorCodeCount) return "unknown";
  return iris::to_string(static_cast<iris::ErrorCode>(code)).data();
}

int iris_connect(const char* socket_path, const char* name, iris_client** out) {
  return iris_connect_with(socket_path, name, nullptr, out);
}

int iris_connect_with(const char* socket_path, const char* name, const iris_client_options* given,
                      iris_client** out) {
  if (out == nullptr) return null_argument("out");
  return guarded([&] {
    iris::ClientOptions options;
    if (socket_path != nullptr) options.socket_path = socket_path;
    if (name != nullptr) options.client_name = name;
    if (given != nullptr) {
      if (given->struct_size < sizeof(iris_client_options))
        throw iris::Error(iris::ErrorCode::kInvalidArgument,
                          "iris_client_options.struct_size is " +
                              std::to_string(given->struct_size) + ", this libiris needs " +
                              std::to_string(sizeof(iris_client_options)) +
                              ": set it to sizeof(iris_client_options)");
      if (given->submit_timeout_ns >= 0)
        options.submit_timeout = std::chrono::nanoseconds(given->submit_timeout_ns);
      if (given->resume_window_ms >= 0)
        options.resume_window = std::chrono::milliseconds(given->resume_window_ms);
      if (given->wait_spin_us >= 0)
        options.wait_spin = std::chrono::microseconds(given->wait_spin_us);
      if (given->gpu_registration_cache >= 0)
        options.gpu_registration_cache = static_cast<std::size_t>(given->gpu_registration_cache);
    }
    *out = new iris_client{iris::Client::connect(options)};
  });
}

void iris_client_release(iris_client* client) { delete client; }

const char* iris_client_engine(const iris_client* client) {
  return client == nullptr ? "" : client->client.engine().c_str();
}

int iris_allocate(iris_client* client, size_t bytes, iris_buffer** out) {
  if (client == nullptr || out == nullptr) return null_argument(client ? "out" : "client");
  return guarded([&] { *out = new iris_buffer{client->client.allocate(bytes)}; });
}

int iris_register_host(iris_client* client, void* ptr, size_t bytes, iris_buffer** out) {
  if (client == nullptr || out == nullptr) return null_argument(client ? "out" : "client");
  return guarded([&] { *out = new iris_buffer{client->client.register_host(ptr, bytes)}; });
}

int iris_share(iris_client* client, const iris_buffer* other, iris_buffer** out) {
  if (client == nullptr || other == nullptr || out == nullptr)
    return null_argument(client == nullptr ? "client" : other == nullptr ? "other" : "out");
  return guarded([&] { *out = new iris_buffer{client->client.share(other->buffer)}; });
}

int iris_register_cuda(iris_client* client, void* device_ptr, size_t bytes, iris_buffer** out) {
  if (client == nullptr || out == nullptr) return null_argument(client ? "out" : "client");
  return guarded(
      [&] { *out = new iris_buffer{client->client.register_cuda_buffer(device_ptr, bytes)}; });
}

int iris_register_hip(iris_client* client, void* device_ptr, size_t bytes, iris_buffer** out) {
  if (client == nullptr || out == nullptr) return null_argument(client ? "out" : "client");
  return guarded(
      [&] { *out = new iris_buffer{client->client.register_hip_buffer(device_ptr, bytes)}; });
}

void* iris_buffer_data(const iris_buffer* buffer) {
  return buffer == nullptr ? nullptr : buffer->buffer.data();
}

size_t iris_buffer_size(const iris_buffer* buffer) {
  return buffer == nullptr ? 0 : buffer->buffer.size();
}

void iris_buffer_release(iris_buffer* buffer) { delete buffer; }

int iris_comm_init(iris_client* client, const char* key, uint32_t nranks, uint32_t rank,
                   iris_comm** out) {
  if (client == nullptr || key == nullptr || out == nullptr)
    return null_argument(client == nullptr ? "client" : key == nullptr ? "key" : "out");
  return guarded(
      [&] { *out = new iris_comm{iris::Communicator::init(client->client, key, nranks, rank)}; });
}

int iris_node_address(iris_client* client, void* buffer, size_t* bytes) {
  if (client == nullptr || bytes == nullptr) return null_argument(client ? "bytes" : "client");
  return guarded([&] {
    const std::string address = client->client.node_address();
    const std::size_t room = *bytes;
    *bytes = address.size();
    if (buffer == nullptr) return;
    if (room < address.size())
      throw iris::Error(iris::ErrorCode::kOutOfRange,
                        "iris_node_address: the address is " + std::to_string(address.size()) +
                            " bytes, the buffer " + std::to_string(room));
    std::memcpy(buffer, address.data(), address.size());
  });
}

int iris_comm_init_nodes(iris_client* client, const char* key, uint32_t nranks, uint32_t rank,
                         const void* const* addresses, const size_t* address_bytes,
                         size_t node_count, const uint32_t* node_of_rank, const void* secret,
                         size_t secret_bytes, int64_t join_timeout_ms, iris_comm** out) {
  if (addresses == nullptr || address_bytes == nullptr || node_of_rank == nullptr ||
      secret == nullptr)
    return null_argument("addresses, address_bytes, node_of_rank or secret");
  iris_comm_options options{sizeof(iris_comm_options),
                            0,
                            node_count,
                            addresses,
                            address_bytes,
                            node_of_rank,
                            secret,
                            secret_bytes,
                            join_timeout_ms,
                            IRIS_TRAFFIC_AUTO};
  return iris_comm_init_with(client, key, nranks, rank, &options, out);
}

int iris_comm_init_with(iris_client* client, const char* key, uint32_t nranks, uint32_t rank,
                        const iris_comm_options* options, iris_comm** out) {
  if (client == nullptr || key == nullptr || out == nullptr)
    return null_argument(client == nullptr ? "client" : key == nullptr ? "key" : "out");
  return guarded([&] {
    iris_comm_options given{};
    if (options != nullptr) {
      // A caller built before traffic_class existed passes the struct up to join_timeout_ms.
      constexpr std::size_t kFirstSize = offsetof(iris_comm_options, traffic_class);
      if (options->struct_size < kFirstSize)
        throw iris::Error(iris::ErrorCode::kInvalidArgument,
                          "iris_comm_options.struct_size is " +
                              std::to_string(options->struct_size) + ", this libiris needs " +
                              std::to_string(sizeof(iris_comm_options)) +
                              ": set it to sizeof(iris_comm_options)");
      std::memcpy(&given, options, std::min<std::size_t>(options->struct_size, sizeof given));
    }
    iris::CommOptions comm_options;
    if (given.op_timeout_ms > 0)
      comm_options.op_timeout = std::chrono::milliseconds(given.op_timeout_ms);
    comm_options.traffic_class = static_cast<iris::TrafficClass>(given.traffic_class);
    if (given.node_count == 0) {
      *out =
          new iris_comm{iris::Communicator::init(client->client, key, nranks, rank, comm_options)};
      return;
    }
    if (given.addresses == nullptr || given.address_bytes == nullptr ||
        given.node_of_rank == nullptr || given.secret == nullptr)
      throw iris::Error(iris::ErrorCode::kInvalidArgument,
                        "iris_comm_options: node_count is " + std::to_string(given.node_count) +
                            " but addresses, address_bytes, node_of_rank or secret is NULL");
    iris::NodeSet nodes;
    for (std::size_t n = 0; n < given.node_count; ++n) {
      if (given.addresses[n] == nullptr)
        throw iris::Error(iris::ErrorCode::kInvalidArgument,
                          "node " + std::to_string(n) + "'s address is NULL");
      nodes.addresses.emplace_back(static_cast<const char*>(given.addresses[n]),
                                   given.address_bytes[n]);
    }
    nodes.node_of_rank.assign(given.node_of_rank, given.node_of_rank + nranks);
    nodes.secret.assign(static_cast<const char*>(given.secret), given.secret_bytes);
    if (given.join_timeout_ms > 0)
      nodes.join_timeout = std::chrono::milliseconds(given.join_timeout_ms);
    *out = new iris_comm{
        iris::Communicator::init(client->client, key, nranks, rank, nodes, comm_options)};
  });
}

int iris_comm_destroy(iris_comm* comm) {
  if (comm == nullptr) return IRIS_OK;
  const int code = guarded([&] { comm->comm.destroy(); });
  delete comm;
  return code;
}

int iris_all_gather(iris_comm* comm, const void* send, void* recv, size_t bytes,
                    const iris_stream* stream, iris_request** out) {
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    return c.all_gather(send, recv, bytes, on);
  });
}

int iris_all_to_all(iris_comm* comm, const void* send, void* recv, size_t bytes_per_peer,
                    const iris_stream* stream, iris_request** out) {
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    return c.all_to_all(send, recv, bytes_per_peer, on);
  });
}

int iris_all_to_all_v(iris_comm* comm, const void* send, const uint64_t* send_counts,
                      const uint64_t* send_displs, void* recv, const uint64_t* recv_counts,
                      const uint64_t* recv_displs, const iris_stream* stream, iris_request** out) {
  if (!send_counts || !send_displs || !recv_counts || !recv_displs)
    return null_argument("a counts or displacements array");
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    const std::size_t n = c.nranks();
    auto array = [n](const uint64_t* values) { return std::vector<uint64_t>(values, values + n); };
    return c.all_to_all_v(send, array(send_counts), array(send_displs), recv, array(recv_counts),
                          array(recv_displs), on);
  });
}

int iris_broadcast(iris_comm* comm, void* buf, size_t bytes, uint32_t root,
                   const iris_stream* stream, iris_request** out) {
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    return c.broadcast(buf, bytes, root, on);
  });
}

int iris_gather(iris_comm* comm, const void* send, void* recv, size_t bytes, uint32_t root,
                const iris_stream* stream, iris_request** out) {
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    return c.gather(send, recv, bytes, root, on);
  });
}

int iris_scatter(iris_comm* comm, const void* send, void* recv, size_t bytes, uint32_t root,
                 const iris_stream* stream, iris_request** out) {
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    return c.scatter(send, recv, bytes, root, on);
  });
}

int iris_check_graphs(iris_client* client) {
  if (client == nullptr) return null_argument("client");
  return guarded([&] { client->client.check_graphs(); });
}

int iris_client_gpu_registrations(const iris_client* client, size_t* held, size_t* retiring) {
  if (client == nullptr) return null_argument("client");
  if (held == nullptr || retiring == nullptr) return null_argument("held or retiring");
  return guarded([&] {
    const auto now = client->client.gpu_registrations();
    *held = now.held;
    *retiring = now.retiring;
  });
}

int iris_request_wait(iris_request* request, int64_t timeout_ns) {
  if (request == nullptr) return null_argument("request");
  int result = IRIS_OK;
  const int code = guarded([&] {
    if (timeout_ns < 0) {
      request->request.wait();
    } else if (!request->request.wait(std::chrono::nanoseconds(timeout_ns))) {
      last_error = "the request did not complete within " + std::to_string(timeout_ns) + " ns";
      result = IRIS_ERROR_TIMEOUT;
    }
  });
  return code != IRIS_OK ? code : result;
}

int iris_request_wait_all(iris_request** requests, size_t count) {
  if (requests == nullptr && count != 0) return null_argument("requests");
  for (size_t i = 0; i < count; ++i)
    if (requests[i] == nullptr) return null_argument("a request");
  // Every request is waited for before the first failure is returned.
  int first = IRIS_OK;
  std::string first_message;
  for (size_t i = 0; i < count; ++i) {
    const int code = iris_request_wait(requests[i], -1);
    if (code != IRIS_OK && first == IRIS_OK) {
      first = code;
      first_message = last_error;
    }
  }
  if (first != IRIS_OK) last_error = first_message;
  return first;
}

int iris_send(iris_comm* comm, const void* buf, size_t bytes, uint32_t peer,
              const iris_stream* stream, iris_request** out) {
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    return c.send(buf, bytes, peer, on);
  });
}

int iris_recv(iris_comm* comm, void* buf, size_t bytes, uint32_t peer, const iris_stream* stream,
              iris_request** out) {
  return submitted(comm, stream, out, [&](iris::Communicator& c, iris::Stream on) {
    return c.recv(buf, bytes, peer, on);
  });
}

int iris_group_start(void) {
  return guarded([] { iris::group_start(); });
}

int iris_group_end(void) {
  return guarded([] { iris::group_end(); });
}

int iris_barrier(iris_comm* comm) {
  if (comm == nullptr) return null_argument("comm");
  return guarded([&] { comm->comm.barrier(); });
}

int iris_request_test(iris_request* request, int* done) {
  if (request == nullptr || done == nullptr) return null_argument(request ? "done" : "request");
  *done = 0;
  return guarded([&] { *done = request->request.test() ? 1 : 0; });
}

void iris_request_release(iris_request* request) { delete request; }

}  // extern "C"
