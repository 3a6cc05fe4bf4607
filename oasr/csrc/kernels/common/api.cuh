// What every kernel library shares: the exported-symbol macro, the error-returning launch
// check, and the error-string entry point its Python binding reads. Framework-free CUDA C++.
#pragma once

#include <cuda_runtime.h>

#define OASR_API extern "C" __attribute__((visibility("default")))

// Returns the launch's error (configuration or an earlier asynchronous fault) as an int; the
// binding raises with oasr_error_string(code).
#define OASR_RETURN_LAST_ERROR() return static_cast<int>(cudaGetLastError())

#define OASR_CUDA_TRY(expr)                            \
  do {                                                 \
    const cudaError_t oasr_err_ = (expr);              \
    if (oasr_err_ != cudaSuccess) return static_cast<int>(oasr_err_); \
  } while (0)

// Defined once per library: each library is one translation unit that includes this header.
OASR_API const char* oasr_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
