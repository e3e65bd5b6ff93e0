// The C interface (iris/iris.h) over the C++ client: each call catches iris::Error and returns its
// code, keeping the message for iris_last_error().
#include "iris/iris.h"

#include <chrono>
#include <exception>
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
    last_error = e.what();
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

}  // namespace

extern "C" {

const char* iris_last_error(void) { return last_error.c_str(); }

const char* iris_error_name(int code) {
  if (code < 0 || static_cast<uint32_t>(code) >= iris::kErrorCodeCount) return "unknown";
  return iris::to_string(static_cast<iris::ErrorCode>(code)).data();
}

int iris_connect(const char* socket_path, const char* name, iris_client** out) {
  if (out == nullptr) return null_argument("out");
  return guarded([&] {
    iris::ClientOptions options;
    if (socket_path != nullptr) options.socket_path = socket_path;
    if (name != nullptr) options.client_name = name;
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

int iris_comm_destroy(iris_comm* comm) {
  if (comm == nullptr) return IRIS_OK;
  const int code = guarded([&] { comm->comm.destroy(); });
  delete comm;
  return code;
}

int iris_all_gather(iris_comm* comm, const void* send, void* recv, size_t bytes, void* cuda_stream,
                    iris_request** out) {
  if (comm == nullptr || out == nullptr) return null_argument(comm ? "out" : "comm");
  return guarded([&] {
    *out = new iris_request{
        cuda_stream == nullptr
            ? comm->comm.all_gather(send, recv, bytes)
            : comm->comm.all_gather(send, recv, bytes, static_cast<CUstream_st*>(cuda_stream))};
  });
}

int iris_all_gather_hip(iris_comm* comm, const void* send, void* recv, size_t bytes,
                        void* hip_stream, iris_request** out) {
  if (comm == nullptr || out == nullptr) return null_argument(comm ? "out" : "comm");
  if (hip_stream == nullptr) return null_argument("hip_stream");
  return guarded([&] {
    *out = new iris_request{
        comm->comm.all_gather(send, recv, bytes, static_cast<ihipStream_t*>(hip_stream))};
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

int iris_request_test(iris_request* request, int* done) {
  if (request == nullptr || done == nullptr) return null_argument(request ? "done" : "request");
  *done = 0;
  return guarded([&] { *done = request->request.test() ? 1 : 0; });
}

void iris_request_release(iris_request* request) { delete request; }

}  // extern "C"
