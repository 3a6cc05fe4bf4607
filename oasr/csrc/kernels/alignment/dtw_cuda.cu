// libdtw_cuda: the batched DTW launcher (extern "C", raw pointers, the stream last; it returns a
// cudaError_t as int). Built by oasr/kernels/jit.py from its spec in oasr/ops/build.py.
#include <cstdint>

#include "alignment/dtw.cuh"
#include "common/api.cuh"
#include "common/signatures.cuh"

using namespace oasr::kernels::alignment;

namespace {

constexpr int kThreads = 256;
constexpr int kMaxRows = 4000;  // three diagonals of (rows + 1) floats fit 48 KiB of shared memory

}  // namespace

OASR_API int oasr_dtw_max_rows() { return kMaxRows; }

// One launch for the whole batch. rows/frames are device arrays, every entry in [1, max_n] /
// [1, max_m] (the binding checks them on the host); move is a (batch, max_n + 1, max_m + 1)
// uint8 workspace.
OASR_API int oasr_dtw_starts(const float* cost, const int64_t* rows, const int64_t* frames,
                             uint8_t* move, int32_t* starts, int batch, int max_n, int max_m,
                             cudaStream_t stream) {
  if (batch <= 0) return 0;
  if (max_n < 1 || max_n > kMaxRows || max_m < 1) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  int threads = ((max_n + 1 + 31) / 32) * 32;
  if (threads > kThreads) threads = kThreads;
  const size_t smem = 3 * static_cast<size_t>(max_n + 1) * sizeof(float);
  const DtwArgs a{cost, rows, frames, move, starts, max_n, max_m};
  dtw_starts_kernel<<<batch, threads, smem, stream>>>(a);
  OASR_RETURN_LAST_ERROR();
}

OASR_EXPORT_SIGNATURES(dtw_cuda, OASR_SIGNATURE(oasr_dtw_max_rows),
                       OASR_SIGNATURE(oasr_dtw_starts))
