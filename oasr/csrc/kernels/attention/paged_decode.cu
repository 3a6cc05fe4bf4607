// libpaged_decode: decode-step paged attention (extern "C"; built by oasr/kernels/jit.py from oasr/ops/build.py).
#include "attention/paged_decode.cuh"
#include "common/api.cuh"
#include "common/signatures.cuh"

using namespace oasr::kernels::attention;

namespace {

template <typename T, int D>
int launch(const PagedDecodeArgs& a, int B, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(a.split_keys) * sizeof(float);
  if (smem > 48 * 1024) {
    OASR_CUDA_TRY(cudaFuncSetAttribute(paged_decode_split_kernel<T, D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  paged_decode_split_kernel<T, D><<<dim3(a.H, B, a.splits), kThreads, smem, stream>>>(a);
  OASR_CUDA_TRY(cudaGetLastError());
  paged_decode_combine_kernel<T, D><<<dim3(a.H, B), D, 0, stream>>>(a);
  OASR_RETURN_LAST_ERROR();
}

template <typename T>
int dispatch(const PagedDecodeArgs& a, int D, int B, cudaStream_t stream) {
  switch (D) {
    case 32: return launch<T, 32>(a, B, stream);
    case 64: return launch<T, 64>(a, B, stream);
    case 128: return launch<T, 128>(a, B, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

// Loads every instantiation's code now, so a first launch inside a CUDA-graph capture never
// has to load a module.
OASR_API int oasr_paged_decode_preload() {
  cudaFuncAttributes attr;
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_split_kernel<__half, 32>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_split_kernel<__half, 64>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_split_kernel<__half, 128>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_split_kernel<__nv_bfloat16, 32>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_split_kernel<__nv_bfloat16, 64>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_split_kernel<__nv_bfloat16, 128>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_combine_kernel<__half, 32>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_combine_kernel<__half, 64>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_combine_kernel<__half, 128>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_combine_kernel<__nv_bfloat16, 32>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_combine_kernel<__nv_bfloat16, 64>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, paged_decode_combine_kernel<__nv_bfloat16, 128>));
  return 0;
}

// dtype: 0 fp16, 1 bf16. Head dims 32, 64, 128.
OASR_API int oasr_paged_decode(const PagedDecodeArgs* args, int B, int D, int dtype,
                               cudaStream_t stream) {
  if (B <= 0) return 0;
  return dtype == 0 ? dispatch<__half>(*args, D, B, stream)
                    : dispatch<__nv_bfloat16>(*args, D, B, stream);
}

OASR_EXPORT_SIGNATURES(paged_decode, OASR_SIGNATURE(oasr_paged_decode_preload),
                       OASR_SIGNATURE(oasr_paged_decode))
