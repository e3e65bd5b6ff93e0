#include "daemon/scaleout/ucx_worker.hpp"

#include "daemon/scaleout/ucx_library.hpp"

#include <cstdlib>
#include <cstring>
#include <unordered_set>
#include <utility>

#include <spdlog/spdlog.h>

#include "iris/error.hpp"

namespace iris::daemon {

namespace {
constexpr unsigned kMessageId = 1;  // the one active message id irisd uses
constexpr std::size_t kMaxHeaderBytes = 4096;

// UCX's table; set once (UcxWorker's constructor loads it) before anything else here runs.
const ucx::Library* loaded = nullptr;
const ucx::Library& lib() { return *loaded; }

std::string describe(ucs_status_t status) { return lib().ucs_status_string(status); }
}  // namespace

struct UcxWorker::Peer {
  UcxWorker* worker;
  PeerId id;
  ucp_ep_h ep = nullptr;
  bool failed = false;
  std::string why;
};

struct UcxWorker::Impl {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<std::unique_ptr<Peer>> peers;
  std::unordered_map<std::string, PeerId> by_address;
  struct Completion {
    Done done;
    ErrorCode code;
    std::string why;
  };
  std::vector<Completion> completions;  // run at the next progress()
  std::vector<PeerId> failed_peers;     // reported at the next progress()
  // Sends and receives UCX has not finished: freed by the destructor if UCX never ends them.
  std::unordered_set<Pending*> in_flight;
};

// A send or rendezvous receive UCX has not finished: what its end runs.
struct UcxWorker::Pending {
  UcxWorker* worker;
  std::string header;  // a send's, kept until UCX is done with it
  Done done;
  const char* what;  // "send" or "receive", for the failure's text

  // Queues the end (a later progress() runs it) and frees this.
  void finish(ucs_status_t status) {
    worker->impl_->in_flight.erase(this);
    worker->complete_later(
        std::move(done), status == UCS_OK ? ErrorCode::kOk : ErrorCode::kPeerLost,
        status == UCS_OK ? "" : std::string("UCX ") + what + " failed: " + describe(status));
    delete this;
  }
  // After the nbx call: finished at once (or failed), or left to the callback.
  void started(ucs_status_ptr_t request) {
    if (!UCS_PTR_IS_PTR(request)) finish(UCS_PTR_STATUS(request));
  }
};

UcxWorker::UcxWorker(Listener& listener, const std::string& net_devices)
    : listener_(listener), impl_(std::make_unique<Impl>()) {
  std::string why;
  loaded = ucx::load(why);
  if (loaded == nullptr) throw Error(ErrorCode::kUnavailable, why);
  ucp_config_t* config = nullptr;
  ucs_status_t status = lib().ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK)
    throw Error(ErrorCode::kUnavailable, "UCX configuration: " + describe(status));
  // A node that vanishes without closing its connections (power, network) is found by UCX's
  // keepalive: every 2 s here unless the site set its own (UCX's default is 20 s).
  if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr)
    lib().ucp_config_modify(config, "KEEPALIVE_INTERVAL", "2s");
  // The operator's choice of devices wins over the environment's: it is also where TCP listens.
  if (!net_devices.empty()) {
    status = lib().ucp_config_modify(config, "NET_DEVICES", net_devices.c_str());
    if (status != UCS_OK) {
      lib().ucp_config_release(config);
      throw Error(ErrorCode::kInvalidArgument,
                  "scale-out-interface '" + net_devices + "': " + describe(status));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "irisd";
  status = lib().ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &impl_->context);
  lib().ucp_config_release(config);
  if (status != UCS_OK)
    throw Error(ErrorCode::kUnavailable, "UCX could not start (ucp_init): " + describe(status));
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = lib().ucp_worker_create(impl_->context, &worker_params, &impl_->worker);
  if (status != UCS_OK) {
    lib().ucp_cleanup(impl_->context);
    throw Error(ErrorCode::kUnavailable, "UCX worker: " + describe(status));
  }
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  status = lib().ucp_worker_get_address(impl_->worker, &address, &length);
  if (status == UCS_OK) {
    address_.assign(reinterpret_cast<const char*>(address), length);
    lib().ucp_worker_release_address(impl_->worker, address);
    status = lib().ucp_worker_get_efd(impl_->worker, &event_fd_);
  }
  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
  handler.id = kMessageId;
  handler.arg = this;
  handler.cb = [](void* arg, const void* header, std::size_t header_length, void* data,
                  std::size_t length, const ucp_am_recv_param_t* param) -> ucs_status_t {
    auto* self = static_cast<UcxWorker*>(arg);
    const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    Payload payload(*self, data, length, rendezvous);
    // Nothing may unwind through UCX: whatever a message causes stays on this side.
    try {
      self->listener_.on_message(
          header_length == 0 ? std::string_view()
                             : std::string_view(static_cast<const char*>(header), header_length),
          payload);
    } catch (const std::exception& e) {
      spdlog::error("scale-out: a message from another node failed here: {}", e.what());
    }
    // A rendezvous payload nobody took is refused: its sender's send fails.
    return rendezvous && !payload.taken_ ? UCS_ERR_REJECTED : UCS_OK;
  };
  if (status == UCS_OK) status = lib().ucp_worker_set_am_recv_handler(impl_->worker, &handler);
  if (status != UCS_OK) {
    lib().ucp_worker_destroy(impl_->worker);
    lib().ucp_cleanup(impl_->context);
    throw Error(ErrorCode::kUnavailable, "UCX worker set-up: " + describe(status));
  }
}

UcxWorker::~UcxWorker() {
  for (auto& peer : impl_->peers) {
    if (peer->ep == nullptr) continue;
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_EP_CLOSE_FLAG_FORCE;  // no waiting for a peer that may be gone
    ucs_status_ptr_t request = lib().ucp_ep_close_nbx(peer->ep, &params);
    if (UCS_PTR_IS_PTR(request)) {
      while (lib().ucp_request_check_status(request) == UCS_INPROGRESS)
        lib().ucp_worker_progress(impl_->worker);
      lib().ucp_request_free(request);
    }
  }
  lib().ucp_worker_destroy(impl_->worker);
  lib().ucp_cleanup(impl_->context);
  // A transfer still in flight when the worker goes (a force-closed endpoint's rendezvous send,
  // say) never ends: irisd is stopping, so its end does not run; what it holds is let go here.
  for (Pending* pending : impl_->in_flight) delete pending;
}

void UcxWorker::complete_later(Done done, ErrorCode code, std::string why) {
  impl_->completions.push_back({std::move(done), code, std::move(why)});
}

bool UcxWorker::progress() {
  bool worked = false;
  while (lib().ucp_worker_progress(impl_->worker) != 0) worked = true;
  // Completions may queue more (a receive's end starting a send): run until none is left.
  while (!impl_->completions.empty() || !impl_->failed_peers.empty()) {
    worked = true;
    auto failed = std::move(impl_->failed_peers);
    impl_->failed_peers.clear();
    for (PeerId id : failed) listener_.on_peer_failed(id, impl_->peers[id]->why);
    auto completions = std::move(impl_->completions);
    impl_->completions.clear();
    for (auto& c : completions) {
      try {
        c.done(c.code, c.why);
      } catch (const std::exception& e) {
        spdlog::error("scale-out: finishing a transfer failed: {}", e.what());
      }
    }
  }
  return worked;
}

bool UcxWorker::arm() {
  if (!impl_->completions.empty() || !impl_->failed_peers.empty()) return false;
  return lib().ucp_worker_arm(impl_->worker) == UCS_OK;
}

UcxWorker::PeerId UcxWorker::connect(const std::string& address) {
  if (auto it = impl_->by_address.find(address); it != impl_->by_address.end()) return it->second;
  auto peer = std::make_unique<Peer>();
  peer->worker = this;
  peer->id = static_cast<PeerId>(impl_->peers.size());
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // failures reported, with UCX's keepalive
  params.err_handler.arg = peer.get();
  params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
    auto* p = static_cast<Peer*>(arg);
    if (p->failed) return;
    p->failed = true;
    p->why = "UCX reports the connection failed (" + describe(status) + ")";
    p->worker->impl_->failed_peers.push_back(p->id);
  };
  const ucs_status_t status = lib().ucp_ep_create(impl_->worker, &params, &peer->ep);
  if (status != UCS_OK)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot connect to a node's irisd (ucp_ep_create: " + describe(status) + ")");
  const PeerId id = peer->id;
  impl_->peers.push_back(std::move(peer));
  impl_->by_address.emplace(address, id);
  return id;
}

std::size_t UcxWorker::peers() const { return impl_->peers.size(); }

bool UcxWorker::failed(PeerId peer) const {
  return peer >= impl_->peers.size() || impl_->peers[peer]->failed;
}

void UcxWorker::send(PeerId peer, std::string header, const void* data, std::size_t bytes,
                     Done done) {
  if (failed(peer)) {
    complete_later(std::move(done), ErrorCode::kPeerLost,
                   peer < impl_->peers.size() ? impl_->peers[peer]->why : "no such node");
    return;
  }
  // UCX aborts the process on a rendezvous header over its transport's limit (8 KiB on TCP): a
  // message whose arguments do not fit fails instead.
  if (header.size() > kMaxHeaderBytes) {
    complete_later(std::move(done), ErrorCode::kLimitExceeded,
                   "a message of " + std::to_string(header.size()) + " header bytes, over the " +
                       std::to_string(kMaxHeaderBytes) +
                       " irisd sends (too many ranks on one node for all-to-all-v?)");
    return;
  }
  auto* pending = new Pending{this, std::move(header), std::move(done), "send"};
  impl_->in_flight.insert(pending);
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  params.user_data = pending;
  params.cb.send = [](void* request, ucs_status_t status, void* user_data) {
    static_cast<Pending*>(user_data)->finish(status);
    lib().ucp_request_free(request);
  };
  pending->started(lib().ucp_am_send_nbx(impl_->peers[peer]->ep, kMessageId, pending->header.data(),
                                         pending->header.size(), data, bytes, &params));
}

void UcxWorker::Payload::receive_into(void* into, Done done) {
  taken_ = true;
  if (!rendezvous_) {
    std::memcpy(into, data_, bytes_);
    worker_.complete_later(std::move(done), ErrorCode::kOk, "");
    return;
  }
  auto* pending = new Pending{&worker_, {}, std::move(done), "receive"};
  worker_.impl_->in_flight.insert(pending);
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  params.user_data = pending;
  params.cb.recv_am = [](void* request, ucs_status_t status, std::size_t, void* user_data) {
    static_cast<Pending*>(user_data)->finish(status);
    lib().ucp_request_free(request);
  };
  pending->started(lib().ucp_am_recv_data_nbx(worker_.impl_->worker, data_, into, bytes_, &params));
}

}  // namespace iris::daemon
