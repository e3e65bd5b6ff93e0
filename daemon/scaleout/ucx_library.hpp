// UCX's entry points, loaded at run time (libucp.so.0, as the GPU runtimes are): irisd starts
// and runs without UCX, a site's UCX (built with CUDA, ROCm or its NICs' verbs) is the one found
// on the loader's path, and UCX's memory hooks (libucm, which replaces mmap and madvise) enter the
// process only once a communicator spans nodes.
#pragma once

#include <ucp/api/ucp.h>

#include <string>

namespace iris::daemon::ucx {

// clang-format off
#define IRIS_UCX_FUNCTIONS(X) \
  X(ucp_config_read) \
  X(ucp_config_release) \
  X(ucp_config_modify) \
  X(ucp_init_version) \
  X(ucp_cleanup) \
  X(ucp_worker_create) \
  X(ucp_worker_destroy) \
  X(ucp_worker_get_address) \
  X(ucp_worker_release_address) \
  X(ucp_worker_get_efd) \
  X(ucp_worker_arm) \
  X(ucp_worker_progress) \
  X(ucp_worker_set_am_recv_handler) \
  X(ucp_ep_create) \
  X(ucp_ep_close_nbx) \
  X(ucp_request_check_status) \
  X(ucp_request_free) \
  X(ucp_am_send_nbx) \
  X(ucp_am_recv_data_nbx) \
  X(ucs_status_string)
// clang-format on

struct Library {
#define IRIS_UCX_DECLARE(name) decltype(&::name) name = nullptr;
  IRIS_UCX_FUNCTIONS(IRIS_UCX_DECLARE)
#undef IRIS_UCX_DECLARE
};

// Loads libucp.so.0 once. Returns nullptr and sets `why` when it cannot (not installed, an
// entry point missing).
const Library* load(std::string& why);

}  // namespace iris::daemon::ucx
