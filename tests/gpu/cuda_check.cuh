// Exit with the call, the place and CUDA's message when a runtime (CUDA_CHECK) or driver
// (CU_CHECK) call fails (GPU test tools).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(call)                                                 \
  do {                                                                   \
    const cudaError_t err_ = (call);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(err_));                            \
      std::exit(3);                                                      \
    }                                                                    \
  } while (0)

#define CU_CHECK(call)                                                      \
  do {                                                                      \
    const CUresult cu_err_ = (call);                                        \
    if (cu_err_ != CUDA_SUCCESS) {                                          \
      const char* text_ = nullptr;                                          \
      cuGetErrorString(cu_err_, &text_);                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,    \
                   text_ != nullptr ? text_ : "unknown CUDA driver error"); \
      std::exit(3);                                                         \
    }                                                                       \
  } while (0)
