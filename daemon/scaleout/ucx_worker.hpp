// irisd's UCX worker: the one connection point between this daemon and the other nodes' daemons
// of multi-node communicators. Active messages only: a small header (a NodeMessage) and, for
// collective data, a payload that UCX moves eagerly or by rendezvous (the receiver's RDMA get
// from the sender's memory where the transport has one; TCP and shared memory otherwise).
//
// Single-threaded (UCS_THREAD_MODE_SINGLE): everything here runs on the progress thread, and
// UCX calls the handlers from inside progress(). Completions of sends and rendezvous receives
// are queued and run at the next progress(), never inside the call that started them, so a
// caller's state never changes under it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "iris/error_code.hpp"

namespace iris::daemon {

class UcxWorker {
 public:
  using PeerId = uint32_t;
  // Ends a send or a receive: kOk, or the error and why.
  using Done = std::function<void(ErrorCode, const std::string&)>;

  // An incoming message's payload, valid during Listener::on_message only.
  class Payload {
   public:
    std::size_t bytes() const { return bytes_; }
    // Copies (eager) or fetches (rendezvous) the payload into `into` (bytes() long, valid until
    // `done`), then calls `done` from a later progress().
    void receive_into(void* into, Done done);

   private:
    friend class UcxWorker;
    Payload(UcxWorker& w, void* data, std::size_t bytes, bool rendezvous)
        : worker_(w), data_(data), bytes_(bytes), rendezvous_(rendezvous) {}
    UcxWorker& worker_;
    void* data_;
    std::size_t bytes_;
    bool rendezvous_;
    bool taken_ = false;
  };

  class Listener {
   public:
    virtual ~Listener() = default;
    // A message arrived; call payload.receive_into to keep its payload (else it is dropped, and
    // a rendezvous sender's send fails with the refusal).
    virtual void on_message(std::string_view header, Payload& payload) = 0;
    // The connection to `peer` failed (its daemon died, its node went away): every send to it
    // fails from now on.
    virtual void on_peer_failed(PeerId peer, const std::string& why) = 0;
  };

  // Throws iris::Error kUnavailable when UCX cannot start (no transport).
  // `net_devices`: UCX_NET_DEVICES for this worker (empty: UCX's own choice or the
  // environment's).
  UcxWorker(Listener& listener, const std::string& net_devices);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // This worker's address, for the other nodes' daemons to connect to.
  const std::string& address() const { return address_; }
  // Readable when the worker has events (after arm()); the progress loop sleeps on it.
  int event_fd() const { return event_fd_; }
  // Runs UCX's progress and the queued completions; true when anything happened.
  bool progress();
  // Arms event_fd() for the next event; false when events are pending (progress first).
  bool arm();

  // A connection to the worker at `address` (the same one for the same address). Throws
  // iris::Error kInvalidArgument for an address UCX cannot use.
  PeerId connect(const std::string& address);
  // Sends `header` and `bytes` of `data` (which stay valid and unchanged until `done`).
  void send(PeerId peer, std::string header, const void* data, std::size_t bytes, Done done);
  // Whether the connection to `peer` has failed.
  bool failed(PeerId peer) const;
  // Connections made so far (each address once).
  std::size_t peers() const;

 private:
  struct Peer;
  struct Impl;
  struct Pending;
  friend class Payload;
  void complete_later(Done done, ErrorCode code, std::string why);

  Listener& listener_;
  std::unique_ptr<Impl> impl_;
  std::string address_;
  int event_fd_ = -1;
};

}  // namespace iris::daemon
