// libquant_cuda: the activation-quantization launchers of the quantization lanes (extern "C",
// raw pointers, the stream last; each returns a cudaError_t as int). Built by
// oasr/kernels/jit.py from its spec in oasr/ops/build.py.
#include <cstdint>

#include "common/api.cuh"
#include "common/signatures.cuh"
#include "quantization/rows_fp8.cuh"

using namespace oasr::kernels::quantization;

namespace {

constexpr int kWarpsPerBlock = 8;

template <class T>
int launch_rows_fp8(const void* x, int64_t rows, int64_t cols, int64_t ld, void* q,
                    float* scales, cudaStream_t stream) {
  const RowsFp8Args<T> a{static_cast<const T*>(x), static_cast<__nv_fp8_e4m3*>(q), scales, rows,
                         cols, ld};
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  constexpr int64_t vec = 16 / sizeof(T);
  const bool vector = cols % vec == 0 && (rows == 1 || ld % vec == 0) &&
                      reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vector) {
    quantize_rows_fp8_kernel<T, kWarpsPerBlock, true>
        <<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(a);
  } else {
    quantize_rows_fp8_kernel<T, kWarpsPerBlock, false>
        <<<static_cast<unsigned>(blocks), kWarpsPerBlock * kWarp, 0, stream>>>(a);
  }
  OASR_RETURN_LAST_ERROR();
}

}  // namespace

// dtype: 0 fp32, 1 fp16, 2 bf16. x: (rows, cols) with row stride ld (elements); q: (rows, cols)
// e4m3 contiguous; scales: (rows,) fp32.
OASR_API int oasr_quantize_rows_fp8(const void* x, int dtype, int64_t rows, int64_t cols,
                                    int64_t ld, void* q, float* scales, cudaStream_t stream) {
  if (rows <= 0) return 0;
  if (cols < 1 || ld < cols || (rows + kWarpsPerBlock - 1) / kWarpsPerBlock > 0x7fffffff) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  switch (dtype) {
    case 0: return launch_rows_fp8<float>(x, rows, cols, ld, q, scales, stream);
    case 1: return launch_rows_fp8<__half>(x, rows, cols, ld, q, scales, stream);
    case 2: return launch_rows_fp8<__nv_bfloat16>(x, rows, cols, ld, q, scales, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

OASR_EXPORT_SIGNATURES(quant_cuda, OASR_SIGNATURE(oasr_quantize_rows_fp8))
