// iris-test-stranger: a process that is not any job's irisd, speaking UCX to a daemon's worker
// address as an attacker who learned it would: bytes that are no message, joins and arrivals for a
// live communicator's key without its secret (one claiming a huge payload), and a large rendezvous
// payload behind a garbage header. Prints how many it sent.
//   iris-test-stranger --address HEX --key KEY --nranks N
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "daemon/scaleout/ucx_worker.hpp"
#include "iris/v1/scaleout.pb.h"
#include "tests/support/hex.hpp"

namespace {

class Quiet final : public iris::daemon::UcxWorker::Listener {
 public:
  void on_message(std::string_view, iris::daemon::UcxWorker::Payload&) override {}
  void on_peer_failed(iris::daemon::UcxWorker::PeerId, const std::string&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  std::string address, key;
  uint32_t nranks = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--address") address = iris::testing::from_hex(argv[i + 1]);
    if (a == "--key") key = argv[i + 1];
    if (a == "--nranks") nranks = static_cast<uint32_t>(std::stoul(argv[i + 1]));
  }
  Quiet quiet;
  iris::daemon::UcxWorker worker(quiet, "");
  const auto peer = worker.connect(address);
  std::vector<std::string> headers;
  headers.push_back(std::string(1000, '\xff'));  // not a message
  iris::v1::NodeMessage m;
  m.set_key(key);
  m.set_secret("not-the-job-secret-0123456789");
  m.set_nranks(nranks);
  m.mutable_join()->set_node(1);
  headers.push_back(m.SerializeAsString());  // a join without the secret
  m.mutable_arrival()->set_seq(1);
  m.mutable_arrival()->set_rank(1);
  m.mutable_arrival()->set_kind(2);
  m.mutable_arrival()->set_bytes(1 << 20);
  m.mutable_arrival()->set_data_bytes(uint64_t{1} << 40);  // claims a terabyte
  headers.push_back(m.SerializeAsString());
  m.mutable_broken()->set_why("forged");
  headers.push_back(m.SerializeAsString());       // a break without the secret
  const std::vector<char> payload(8 << 20, 'x');  // rendezvous-sized
  int sent = 0, done = 0;
  for (const auto& header : headers) {
    for (bool with_payload : {false, true}) {
      worker.send(peer, header, with_payload ? payload.data() : nullptr,
                  with_payload ? payload.size() : 0,
                  [&](iris::ErrorCode, const std::string&) { ++done; });
      ++sent;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (done < sent && std::chrono::steady_clock::now() < deadline) worker.progress();
  std::printf("stranger sent %d messages, %d finished\n", sent, done);
  return 0;
}
