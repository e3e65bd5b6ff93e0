// irisd going away, seen from every way a client can be calling: each path must learn it
// (daemon_gone) rather than hang or misreport it, however irisd went (SIGKILL, SIGTERM). One
// client per path, all at once against one death, as a node's jobs would be. The delays are
// printed (docs/PERFORMANCE.md keeps them); the bound asserted is only "not a hang".
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "iris/iris.h"
#include "iris/iris.hpp"
#include "tests/support/client_helpers.hpp"
#include "tests/support/daemon_process.hpp"

namespace iris::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Longer than any path may take to notice: past it the path counts as hung.
constexpr auto kHung = 5s;

struct Path {
  const char* name;
  // Runs until irisd's death shows; returns the error code it showed as.
  std::function<ErrorCode(Client&, Communicator&, Buffer& send, Buffer& recv)> run;
};

// Every collective below waits for rank 1, which never comes: only irisd's death ends it.
const Path kPaths[] = {
    {"wait()",
     [](Client&, Communicator& comm, Buffer& s, Buffer& r) {
       return code_of([&] { comm.all_gather(s.data(), r.data(), 64).wait(); });
     }},
    {"wait(10 ms) in a loop",
     [](Client&, Communicator& comm, Buffer& s, Buffer& r) {
       auto request = comm.all_gather(s.data(), r.data(), 64);
       return code_of([&] {
         while (!request.wait(10ms)) {
         }
       });
     }},
    {"test() in a loop",
     [](Client&, Communicator& comm, Buffer& s, Buffer& r) {
       auto request = comm.all_gather(s.data(), r.data(), 64);
       return code_of([&] {
         while (!request.test()) {
         }
       });
     }},
    {"submitting",
     [](Client& client, Communicator&, Buffer&, Buffer&) {
       return code_of([&] {
         for (;;) client.nop().wait();
       });
     }},
    {"barrier()", [](Client&, Communicator& comm, Buffer&,
                     Buffer&) { return code_of([&] { comm.barrier(); }); }},
    {"wait_all()",
     [](Client&, Communicator& comm, Buffer& s, Buffer& r) {
       std::vector<Request> requests;
       requests.push_back(comm.all_gather(s.data(), r.data(), 64));
       requests.push_back(comm.all_gather(s.data(), r.data(), 64));
       return code_of([&] { wait_all(requests); });
     }},
    {"check_graphs() in a loop",
     [](Client& client, Communicator&, Buffer&, Buffer&) {
       return code_of([&] {
         for (;;) {
           client.check_graphs();
           std::this_thread::sleep_for(1ms);
         }
       });
     }},
    {"C: iris_request_test in a loop",
     [](Client&, Communicator&, Buffer& s, Buffer& r) {
       iris_client* client = nullptr;
       iris_comm* comm = nullptr;
       iris_request* request = nullptr;
       int code = iris_connect(std::getenv("IRIS_TEST_SOCKET"), "c-test", &client);
       if (code == IRIS_OK) code = iris_comm_init(client, "gone-c-test", 2, 0, &comm);
       iris_buffer *send = nullptr, *recv = nullptr;
       if (code == IRIS_OK) code = iris_allocate(client, 64, &send);
       if (code == IRIS_OK) code = iris_allocate(client, 128, &recv);
       if (code == IRIS_OK)
         code = iris_all_gather(comm, iris_buffer_data(send), iris_buffer_data(recv), 64, nullptr,
                                &request);
       int done = 0;
       while (code == IRIS_OK && !done) code = iris_request_test(request, &done);
       iris_request_release(request);
       iris_buffer_release(send);
       iris_buffer_release(recv);
       iris_comm_destroy(comm);
       iris_client_release(client);
       (void)s;
       (void)r;
       return static_cast<ErrorCode>(code);
     }},
};

class DaemonGone : public ::testing::Test {
 protected:
  // Starts every path, lets them settle into waiting, ends irisd with `end`, and checks that
  // every path showed daemon_gone within kHung.
  void every_path_notices(const std::function<void()>& end, const char* how) {
    ::setenv("IRIS_TEST_SOCKET", daemon.socket().c_str(), 1);
    struct Seen {
      ErrorCode code = ErrorCode::kOk;
      Clock::time_point at;
      bool done = false;
    };
    std::vector<Seen> seen(std::size(kPaths));
    std::vector<std::thread> threads;
    std::vector<Client> clients;
    for (std::size_t i = 0; i < std::size(kPaths); ++i)
      clients.push_back(Client::connect(options_for(daemon, kPaths[i].name)));
    for (std::size_t i = 0; i < std::size(kPaths); ++i) {
      threads.emplace_back([&, i] {
        Client& client = clients[i];
        auto comm = Communicator::init(client, "gone-" + std::to_string(i), 2, 0);
        auto send = client.allocate(64), recv = client.allocate(128);
        seen[i].code = kPaths[i].run(client, comm, send, recv);
        seen[i].at = Clock::now();
        seen[i].done = true;
      });
    }
    std::this_thread::sleep_for(300ms);  // every path waiting, sleeping or spinning
    for (std::size_t i = 0; i < seen.size(); ++i)
      ASSERT_FALSE(seen[i].done) << kPaths[i].name << " ended before irisd did";
    const auto ended = Clock::now();
    end();
    for (auto& t : threads) t.join();  // each bounded: a hang fails below, then by ctest's timeout
    for (std::size_t i = 0; i < seen.size(); ++i) {
      const auto after = std::chrono::duration<double, std::milli>(seen[i].at - ended).count();
      std::printf("[ %s ] %-32s noticed after %7.2f ms as %s\n", how, kPaths[i].name, after,
                  iris_error_name(static_cast<int>(seen[i].code)));
      EXPECT_EQ(seen[i].code, ErrorCode::kDaemonGone) << kPaths[i].name;
      EXPECT_LT(seen[i].at - ended, kHung) << kPaths[i].name << " hung";
    }
  }

  // Clients told to wait 0 ms for irisd to come back: they fail at once (resume_test.cpp has
  // the clients that wait).
  DaemonProcess daemon{{"--resume-window-ms", "0"}};
};

TEST_F(DaemonGone, EveryPathNoticesASigkill) {
  every_path_notices([&] { daemon.kill(); }, "SIGKILL");
}

TEST_F(DaemonGone, EveryPathNoticesASigterm) {
  every_path_notices([&] { EXPECT_EQ(daemon.stop(), 0) << daemon.log(); }, "SIGTERM");
}

}  // namespace
}  // namespace iris::testing
