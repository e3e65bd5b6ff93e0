// A communicator's error state, watched requests and scratch memory (nccl_comm.hpp).
#include "client/nccl/nccl_comm.hpp"

#include "client/nccl/fallback_nccl.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "client/nccl/nccl_errors.hpp"

namespace iris::nccl {

void check_comm(const ncclComm* comm) {
  if (comm == nullptr) throw NcclError(ncclInvalidArgument, "comm is NULL");
}

char* HostScratch::reserve(Client& client, std::size_t bytes) {
  constexpr std::size_t kSmallest = 64 << 10;
  bytes = std::max(bytes, kSmallest);
  if (!buffer_.data() || buffer_.size() < bytes) {
    buffer_ = Buffer();  // the old one goes first: host operations finished with it
    buffer_ = client.allocate(std::bit_ceil(bytes));
  }
  return buffer_.as<char>();
}

}  // namespace iris::nccl

void ncclComm::fail(ncclResult_t result, const std::string& message) {
  std::lock_guard lock(mutex);
  if (async_error != ncclSuccess) return;
  async_error = result;
  async_message = message;
  iris::nccl::debug_print(iris::nccl::DebugLevel::kWarn,
                          "communicator " + key + " rank " + std::to_string(rank) + ": " + message);
}

ncclResult_t ncclComm::poll() {
  if (ready.load()) {
    try {
      lane->client.check_graphs();  // the failure of a replay of a captured operation
    } catch (const iris::Error& e) {
      fail(iris::nccl::result_of(e.code()),
           std::string("a CUDA graph's replay of an operation failed: ") + e.what());
    }
  }
  {
    std::lock_guard lock(mutex);
    auto keep = in_flight.begin();
    for (auto& request : in_flight) {
      bool done = false;
      try {
        done = request.test();
      } catch (const iris::Error& e) {
        if (async_error == ncclSuccess) {
          async_error = iris::nccl::result_of(e.code());
          async_message = e.what();
        }
        done = true;
      }
      if (!done) *keep++ = std::move(request);
    }
    in_flight.erase(keep, in_flight.end());
    if (async_error != ncclSuccess) return async_error;
  }
  if (fallback != nullptr) {
    const iris::nccl::FallbackNccl* fb = iris::nccl::fallback_nccl();
    ncclResult_t state = ncclSuccess;
    if (fb->CommGetAsyncError(fallback, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress) {
      const char* why = fb->GetLastError(fallback);
      fail(state, std::string("the fallback NCCL (") + fb->path +
                      ") failed: " + (why != nullptr ? why : ""));
      return state;
    }
  }
  return ready.load() ? ncclSuccess : ncclInProgress;
}

void ncclComm::watch(iris::Request request) {
  {
    std::lock_guard lock(mutex);
    in_flight.push_back(std::move(request));
    if (in_flight.size() < 64) return;
  }
  poll();
}

void ncclComm::check_usable(const char* function) {
  if (!ready.load())
    throw iris::nccl::NcclError(ncclInvalidUsage,
                                std::string(function) +
                                    " on a communicator still initializing: poll "
                                    "ncclCommGetAsyncError until it returns ncclSuccess");
  std::lock_guard lock(mutex);
  if (async_error != ncclSuccess)
    throw iris::nccl::NcclError(async_error, "the communicator failed earlier (" + async_message +
                                                 "); abort it and make a new one");
}

void ncclComm::wait_for(iris::Request& request) const {
  while (!request.wait(kAbortPoll))
    if (aborting.load())
      throw iris::nccl::NcclError(ncclInvalidUsage,
                                  "ncclCommAbort ended the communicator while this call waited for "
                                  "irisd; make a new communicator");
}

void ncclComm::stop_calls() {
  // A call counts itself in, then looks at `aborting`; this stores `aborting`, then reads the
  // count (both sequentially consistent): a call either saw the abort and left, or is counted.
  aborting.store(true);
  for (uint32_t inside = calls.load(); inside != 0; inside = calls.load()) calls.wait(inside);
}

namespace iris::nccl {

CommCall::CommCall(ncclComm* comm, const char* function) {
  check_comm(comm);
  comm->calls.fetch_add(1);
  comm_ = comm;
  if (comm->aborting.load()) {
    leave();
    throw NcclError(
        ncclInvalidUsage,
        std::string(function) + " on a communicator that ncclCommAbort ended or is ending");
  }
}

CommCall::~CommCall() { leave(); }

void CommCall::leave() {
  if (comm_ == nullptr) return;
  if (comm_->calls.fetch_sub(1) == 1 && comm_->aborting.load()) comm_->calls.notify_all();
  comm_ = nullptr;
}

CommRef::CommRef(ncclComm* comm) : comm_(comm) { comm->refs.fetch_add(1); }

CommRef& CommRef::operator=(CommRef&& other) noexcept {
  if (this != &other) {
    release(comm_);
    comm_ = std::exchange(other.comm_, nullptr);
  }
  return *this;
}

void CommRef::release(ncclComm* comm) {
  if (comm != nullptr && comm->refs.fetch_sub(1) == 1) delete comm;
}

}  // namespace iris::nccl

namespace {
constexpr std::size_t kBusIdBytes = 32;
}

void ncclComm::start_gpu_exchange(const std::string& bus_id) {
  gpu_table = lane->client.allocate(kBusIdBytes * nranks);
  char* mine = gpu_table.as<char>() + kBusIdBytes * rank;
  std::memset(mine, 0, kBusIdBytes);
  std::memcpy(mine, bus_id.data(), std::min(bus_id.size(), kBusIdBytes - 1));
  gpu_exchange = comm.all_gather(mine, gpu_table.data(), kBusIdBytes);
}

bool ncclComm::shares_a_gpu() {
  if (shares_gpu) return *shares_gpu;
  bool shared = false;
  if (gpu_exchange.valid()) {
    wait_for(gpu_exchange);
    const char* table = gpu_table.as<char>();
    const char* mine = table + kBusIdBytes * rank;
    for (uint32_t r = 0; r < nranks; ++r)
      if (r != rank && mine[0] != 0 && std::memcmp(table + kBusIdBytes * r, mine, kBusIdBytes) == 0)
        shared = true;
  }
  shares_gpu = shared;
  return shared;
}

void ncclComm::count(iris::nccl::OpKind kind, const iris::nccl::PlanBytes& bytes, bool on_gpu) {
  iris::nccl::OpTally& t = tally[static_cast<int>(kind)];
  ++t.calls;
  t.by_irisd += bytes.by_irisd;
  (on_gpu ? t.on_gpu : t.on_host) += bytes.local;
  report_tally(false);
}

void ncclComm::count_fallback(iris::nccl::OpKind kind, uint64_t bytes) {
  iris::nccl::OpTally& t = tally[static_cast<int>(kind)];
  ++t.calls;
  t.by_fallback += bytes;
  report_tally(false);
}

void ncclComm::report_tally(bool now_anyway) {
  const auto now = std::chrono::steady_clock::now();
  if (!now_anyway && now - reported_at < std::chrono::seconds(1)) return;
  reported_at = now;
  std::vector<iris::Client::ApiWork> work;
  for (int k = 0; k < iris::nccl::kOpKindCount; ++k) {
    const iris::nccl::OpTally &t = tally[k], &r = reported[k];
    if (t.calls == r.calls) continue;
    work.push_back({static_cast<uint32_t>(k), t.calls - r.calls, t.by_irisd - r.by_irisd,
                    t.on_gpu - r.on_gpu, t.on_host - r.on_host, t.by_fallback - r.by_fallback});
  }
  if (work.empty()) return;
  try {
    lane->client.report_api_work(work);
    reported = tally;
  } catch (const iris::Error& e) {
    iris::nccl::debug_print(
        iris::nccl::DebugLevel::kWarn,
        std::string("could not report the operations' counts to irisd: ") + e.what());
  }
}

void ncclComm::report_at_exit() {
  if (calls.load() != 0) return;
  iris::nccl::debug_print(iris::nccl::DebugLevel::kInfo, tally_report() + " (the process exits)");
  report_tally(true);
}

std::string ncclComm::tally_report() const {
  std::string report = "communicator " + key + " rank " + std::to_string(rank) + " ended:";
  bool any = false;
  for (int k = 0; k < iris::nccl::kOpKindCount; ++k) {
    const iris::nccl::OpTally& t = tally[k];
    if (t.calls == 0) continue;
    any = true;
    report += std::string(" ") + iris::nccl::op_name(static_cast<iris::nccl::OpKind>(k)) + " " +
              std::to_string(t.calls) + " calls, " + std::to_string(t.by_irisd) +
              " bytes by irisd's engine (" + lane->client.engine() + ")";
    if (t.on_gpu > 0) report += ", " + std::to_string(t.on_gpu) + " by kernels on the GPU's SMs";
    if (t.on_host > 0) report += ", " + std::to_string(t.on_host) + " by the host";
    if (t.by_fallback > 0)
      report += ", " + std::to_string(t.by_fallback) + " by the fallback NCCL (on the GPU's SMs)";
    report += ";";
  }
  return any ? report : report + " no operations";
}
