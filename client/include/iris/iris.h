/* libiris's C interface: the same client as the C++ API (iris/iris.hpp), for C programs and for
 * language bindings (client/python/iris loads it with ctypes).
 *
 * Every function that can fail returns an iris error code (the values of iris::ErrorCode:
 * IRIS_OK is 0) and leaves the message, which says what to do, in iris_last_error() of the
 * calling thread. Objects are opaque; each is released by its own function. A buffer, a
 * communicator or a request keeps its client's connection alive until it is released. */
#ifndef IRIS_IRIS_H
#define IRIS_IRIS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The values of iris::ErrorCode (iris/error_code.hpp); a test checks that both lists agree. */
enum {
  IRIS_OK = 0,
  IRIS_ERROR_INVALID_ARGUMENT = 1,
  IRIS_ERROR_NOT_FOUND = 2,
  IRIS_ERROR_OUT_OF_RANGE = 3,
  IRIS_ERROR_PERMISSION_DENIED = 4,
  IRIS_ERROR_ALREADY_EXISTS = 5,
  IRIS_ERROR_SIZE_MISMATCH = 6,
  IRIS_ERROR_SEQUENCE_ERROR = 7,
  IRIS_ERROR_NRANKS_MISMATCH = 8,
  IRIS_ERROR_PEER_LOST = 9,
  IRIS_ERROR_LIMIT_EXCEEDED = 10,
  IRIS_ERROR_BUSY = 11,
  IRIS_ERROR_TIMEOUT = 12,
  IRIS_ERROR_DAEMON_GONE = 13,
  IRIS_ERROR_PROTOCOL_MISMATCH = 14,
  IRIS_ERROR_UNAVAILABLE = 15,
  IRIS_ERROR_INTERNAL = 16,
  IRIS_ERROR_ENGINE_ERROR = 17,
  IRIS_ERROR_CANCELLED = 18
};

typedef struct iris_client iris_client;
typedef struct iris_buffer iris_buffer;
typedef struct iris_comm iris_comm;
typedef struct iris_request iris_request;

/* The message of the last call on this thread that failed ("" when none has), without the
 * code's name (iris_error_name gives that). */
const char* iris_last_error(void);
/* The name of an error code ("peer_lost"). */
const char* iris_error_name(int code);

/* Attaches to irisd at `socket_path` (NULL: $IRIS_SOCKET, else /run/irisd/irisd.sock); `name` is
 * shown by
 * `iris-ctl sessions` (may be NULL). */
int iris_connect(const char* socket_path, const char* name, iris_client** out);

/* What iris::ClientOptions sets besides the socket and name. Set struct_size to
 * sizeof(iris_client_options); a field below 0 keeps its default. */
typedef struct iris_client_options {
  uint32_t struct_size;
  /* How long a submission waits for room in the ring before it fails with busy (default: for
   * ever). */
  int64_t submit_timeout_ns;
  /* How long calls wait for a restarted irisd (default: $IRIS_RESUME_WINDOW_MS, else irisd's
   * --resume-window-ms); 0 fails with daemon_gone at once. */
  int64_t resume_window_ms;
  /* How long wait() polls before it sleeps (default: $IRIS_WAIT_SPIN_US, else 50). */
  int64_t wait_spin_us;
  /* First-use GPU registrations kept (default 1024; 0 turns first-use registration off). */
  int64_t gpu_registration_cache;
} iris_client_options;
/* iris_connect with `options` (NULL: every default). */
int iris_connect_with(const char* socket_path, const char* name, const iris_client_options* options,
                      iris_client** out);
/* Detaches (pending requests fail) and frees the client. */
void iris_client_release(iris_client* client);
/* "host", "cuda" or "hsa": the engine irisd runs. */
const char* iris_client_engine(const iris_client* client);

/* Host memory shared with irisd. */
int iris_allocate(iris_client* client, size_t bytes, iris_buffer** out);
/* GPU memory of this process (any range of a cudaMalloc allocation); it must outlive the
 * buffer. */
int iris_register_cuda(iris_client* client, void* device_ptr, size_t bytes, iris_buffer** out);
/* The same for AMD GPUs (hsa engine): any range of a hipMalloc allocation. */
int iris_register_hip(iris_client* client, void* device_ptr, size_t bytes, iris_buffer** out);
/* Existing host memory of this process, shared with irisd in place (see
 * iris::Client::register_host: page-aligned, private anonymous memory; one copy now). */
int iris_register_host(iris_client* client, void* ptr, size_t bytes, iris_buffer** out);
/* The host buffer of another client of this process, registered with `client`'s session too (the
 * same memory, no copy: iris::Client::share). */
int iris_share(iris_client* client, const iris_buffer* other, iris_buffer** out);
void* iris_buffer_data(const iris_buffer* buffer);
size_t iris_buffer_size(const iris_buffer* buffer);
void iris_buffer_release(iris_buffer* buffer);

/* Joins the communicator `key` as `rank` of `nranks`. */
int iris_comm_init(iris_client* client, const char* key, uint32_t nranks, uint32_t rank,
                   iris_comm** out);
/* This node's irisd address for communicators across nodes (iris::Client::node_address): sets
 * *bytes to its size and, when `buffer` is not NULL, copies it there (IRIS_ERROR_OUT_OF_RANGE if
 * *bytes was smaller). The job gathers every node's address with its own means. */
int iris_node_address(iris_client* client, void* buffer, size_t* bytes);
/* iris_comm_init across nodes (iris::NodeSet, docs/SCALE-OUT.md): `node_count` addresses (each
 * address_bytes[i] long), the node of each of the nranks ranks, and the job's secret (16 to 1024
 * random bytes, the same on every rank). Returns once every node's irisd has a rank of it
 * (IRIS_ERROR_TIMEOUT after join_timeout_ms; 0 or less: 60 s). */
int iris_comm_init_nodes(iris_client* client, const char* key, uint32_t nranks, uint32_t rank,
                         const void* const* addresses, const size_t* address_bytes,
                         size_t node_count, const uint32_t* node_of_rank, const void* secret,
                         size_t secret_bytes, int64_t join_timeout_ms, iris_comm** out);
/* What iris_comm_init_with takes besides the key and ranks (iris::CommOptions and iris::NodeSet).
 * Set struct_size to sizeof(iris_comm_options); zero the rest for the defaults. */
typedef struct iris_comm_options {
  uint32_t struct_size;
  /* NCCL's watchdog (iris::CommOptions::op_timeout): a collective waiting this long for a rank
   * breaks the communicator (IRIS_ERROR_TIMEOUT naming the ranks), a send or receive not matched
   * this long fails. 0: none. The rank that creates the communicator chooses it. */
  int64_t op_timeout_ms;
  /* Across nodes, as iris_comm_init_nodes takes them; node_count 0: one node. */
  size_t node_count;
  const void* const* addresses;
  const size_t* address_bytes;
  const uint32_t* node_of_rank;
  const void* secret;
  size_t secret_bytes;
  int64_t join_timeout_ms;
  /* Where its copies wait while users share the engines (iris::CommOptions::traffic_class):
   * IRIS_TRAFFIC_AUTO (0, by size), IRIS_TRAFFIC_LATENCY, IRIS_TRAFFIC_BULK. Added after
   * join_timeout_ms: a struct_size that ends before it means auto. */
  uint32_t traffic_class;
} iris_comm_options;
#define IRIS_TRAFFIC_AUTO 0u
#define IRIS_TRAFFIC_LATENCY 1u
#define IRIS_TRAFFIC_BULK 2u
/* iris_comm_init or iris_comm_init_nodes with `options` (NULL: every default, one node). */
int iris_comm_init_with(iris_client* client, const char* key, uint32_t nranks, uint32_t rank,
                        const iris_comm_options* options, iris_comm** out);
/* Leaves the communicator (the other ranks' later collectives fail with peer_lost) and frees it,
 * also when leaving failed. */
int iris_comm_destroy(iris_comm* comm);

/* A GPU stream to order a collective on. Pass NULL for `stream` to wait for the collective from
 * the host; otherwise the copies start when the stream reaches the call, and work queued on it
 * afterwards runs once every block has landed. `handle` is a cudaStream_t (IRIS_STREAM_CUDA,
 * cuda engine) or a hipStream_t (IRIS_STREAM_HIP, hsa engine), never the legacy default stream. */
enum { IRIS_STREAM_CUDA = 1, IRIS_STREAM_HIP = 2 };
typedef struct iris_stream {
  void* handle;
  int kind;
} iris_stream;

/* The collectives, with NCCL's and MPI's semantics (README, "Collectives"); pointers lie in
 * registered buffers; arguments marked "root only" are ignored (and may be NULL) elsewhere. */
/* `bytes` from `send` land at recv + rank * bytes on every rank. */
int iris_all_gather(iris_comm* comm, const void* send, void* recv, size_t bytes,
                    const iris_stream* stream, iris_request** out);
/* Block j of `send` (bytes_per_peer at send + j * bytes_per_peer) lands at rank j's
 * recv + rank * bytes_per_peer. */
int iris_all_to_all(iris_comm* comm, const void* send, void* recv, size_t bytes_per_peer,
                    const iris_stream* stream, iris_request** out);
/* MPI_Alltoallv in bytes; each array has nranks entries. */
int iris_all_to_all_v(iris_comm* comm, const void* send, const uint64_t* send_counts,
                      const uint64_t* send_displs, void* recv, const uint64_t* recv_counts,
                      const uint64_t* recv_displs, const iris_stream* stream, iris_request** out);
/* Root's `bytes` at `buf` land in every rank's `buf`. */
int iris_broadcast(iris_comm* comm, void* buf, size_t bytes, uint32_t root,
                   const iris_stream* stream, iris_request** out);
/* `bytes` from each rank's `send` land at root's recv + rank * bytes (recv: root only). */
int iris_gather(iris_comm* comm, const void* send, void* recv, size_t bytes, uint32_t root,
                const iris_stream* stream, iris_request** out);
/* Root's send + rank * bytes lands in each rank's `recv` (send: root only). */
int iris_scatter(iris_comm* comm, const void* send, void* recv, size_t bytes, uint32_t root,
                 const iris_stream* stream, iris_request** out);
/* Waits up to `timeout_ns` (negative: without limit); IRIS_ERROR_TIMEOUT when it ran out, else
 * the collective's own result. A request that itself failed with IRIS_ERROR_TIMEOUT (the
 * communicator's op_timeout, irisd's --p2p-timeout-ms) returns the same code: iris_request_test
 * tells the two apart (it returns the failure; a request still running is not done). */
int iris_request_wait(iris_request* request, int64_t timeout_ns);
/* Waits for every request; returns IRIS_OK, or the first failure by position once all of them
 * have completed. */
int iris_request_wait_all(iris_request** requests, size_t count);
/* Returns once every rank of the communicator has called it (a collective that moves nothing). */
int iris_barrier(iris_comm* comm);
/* Point to point: `bytes` at `buf` go to rank `peer`'s matching iris_recv, matched in order per
 * (communicator, source, destination); both sides must pass the same size. Stream-ordered sends
 * and receives that depend on each other go between iris_group_start and iris_group_end
 * (iris/group.hpp says why). */
int iris_send(iris_comm* comm, const void* buf, size_t bytes, uint32_t peer,
              const iris_stream* stream, iris_request** out);
int iris_recv(iris_comm* comm, void* buf, size_t bytes, uint32_t peer, const iris_stream* stream,
              iris_request** out);
int iris_group_start(void);
int iris_group_end(void);
/* *done = 1 once complete (returns the collective's result then), else 0 and IRIS_OK. */
int iris_request_test(iris_request* request, int* done);
void iris_request_release(iris_request* request);
/* Collectives called while their stream captures a CUDA graph become part of the graph (README,
 * "CUDA graphs"); their iris_request has nothing to wait for. After synchronizing a replay's
 * stream, this returns the failure of the last failed replay of any of the client's captured
 * collectives (IRIS_ERROR_PEER_LOST, IRIS_ERROR_TIMEOUT, ...), else IRIS_OK. */
int iris_check_graphs(iris_client* client);

/* With irisd's cuda engine, GPU memory a collective names that no buffer covers (a torch tensor)
 * is registered on first use, once per allocation, and kept while that allocation lives
 * (iris::ClientOptions::gpu_registration_cache). These are the registrations held now and those
 * retiring (ending once the requests naming them finish). */
int iris_client_gpu_registrations(const iris_client* client, size_t* held, size_t* retiring);

/* GPU memory [ptr, ptr + bytes) of this process is about to be freed: every client of this process
 * ends its first-use registrations of memory in that range, so that irisd holds none of it once
 * the allocator frees it. For allocators that hand memory back to the driver themselves (the
 * PyTorch allocator in libiris_torch.so calls it); harmless for memory never registered. */
void iris_gpu_memory_freed(const void* ptr, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* IRIS_IRIS_H */
