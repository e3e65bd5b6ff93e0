// A GPU stream to order a collective on: a CUDA stream (cudaStream_t / CUstream, cuda engine) or
// a HIP stream (hipStream_t, hsa engine). A default-constructed Stream means "no stream": the
// collective is waited for from the host.
#pragma once

struct CUstream_st;   // cudaStream_t and CUstream point to it
struct ihipStream_t;  // hipStream_t points to it (AMD)

namespace iris {

class Stream {
 public:
  enum class Kind { kNone, kCuda, kHip };

  Stream() = default;
  // Implicit, so that a cudaStream_t or hipStream_t can be passed where a Stream is expected.
  // A null stream (the legacy default stream) is refused when the collective is submitted.
  Stream(CUstream_st* stream) : handle_(stream), kind_(Kind::kCuda) {}  // NOLINT
  Stream(ihipStream_t* stream) : handle_(stream), kind_(Kind::kHip) {}  // NOLINT

  Kind kind() const { return kind_; }
  void* handle() const { return handle_; }
  explicit operator bool() const { return kind_ != Kind::kNone; }

 private:
  void* handle_ = nullptr;
  Kind kind_ = Kind::kNone;
};

}  // namespace iris
