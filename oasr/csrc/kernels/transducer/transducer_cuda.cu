// libtransducer_cuda: the one-launch transducer greedy decode (extern "C", raw pointers, the
// stream last; each returns a cudaError_t as int). One CTA per row runs
// oasr::transducer::RowDecoder (greedy_decode.cuh) with the block executor below. Built by
// oasr/kernels/jit.py from its spec in oasr/ops/build.py.
#include <cstdint>

#include "common/api.cuh"
#include "common/signatures.cuh"
#include "transducer/greedy_decode.cuh"

using namespace oasr::transducer;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct BlockExec {
  float* red_val;  // (kWarps,) reduction scratch
  int* red_idx;    // (kWarps,)

  template <class F>
  __device__ void each(int n, F&& f) const {
    for (int i = threadIdx.x; i < n; i += blockDim.x) f(i);
  }
  // A warp per output row, its lanes strided over k, then a shuffle sum.
  template <class W>
  __device__ void dot_rows(float* out, const W* w, const W* bias, const float* x, int rows,
                           int k) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int r = warp; r < rows; r += kWarps) {
      const W* row = w + static_cast<int64_t>(r) * k;
      float acc = 0.f;
      for (int i = lane; i < k; i += 32) acc += to_float(row[i]) * x[i];
      for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (lane == 0) out[r] = acc + (bias ? to_float(bias[r]) : 0.f);
    }
  }
  // The first maximum (lowest index among equals; NaN wins, as in torch.argmax), on every thread.
  __device__ int argmax(const float* x, int n, float* best) const {
    float m = -INFINITY;
    int arg = n;  // none yet
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = x[i];
      if (arg == n || v > m || (v != v && m == m)) {
        m = v;
        arg = i;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, m, off);
      const int oa = __shfl_xor_sync(0xffffffffu, arg, off);
      if (better(om, oa, m, arg, n)) {
        m = om;
        arg = oa;
      }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
      red_val[warp] = m;
      red_idx[warp] = arg;
    }
    __syncthreads();
    m = red_val[0];
    arg = red_idx[0];
    for (int w = 1; w < kWarps; ++w) {
      if (better(red_val[w], red_idx[w], m, arg, n)) {
        m = red_val[w];
        arg = red_idx[w];
      }
    }
    __syncthreads();  // red_* are reused by the next reduction
    *best = m;
    return arg;
  }
  __device__ static bool better(float om, int oa, float m, int arg, int n) {
    if (oa == n) return false;
    if (arg == n) return true;
    const bool onan = om != om, nan = m != m;
    if (onan != nan) return onan;
    if (onan || om == m) return oa < arg;
    return om > m;
  }
  __device__ float sum_exp(const float* x, int n, float m) const {
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += expf(x[i] - m);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red_val[warp] = s;
    __syncthreads();
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += red_val[w];
    __syncthreads();
    return total;
  }
  __device__ void sync() const { __syncthreads(); }
  template <class F>
  __device__ void one(F&& f) const {
    if (threadIdx.x == 0) f();
  }
};

template <class W>
__global__ void __launch_bounds__(kThreads) greedy_decode_kernel(GreedyArgs<W> a) {
  extern __shared__ float smem[];
  __shared__ float red_val[kWarps];
  __shared__ int red_idx[kWarps];
  __shared__ int window[kMaxContext];
  BlockExec ex{red_val, red_idx};
  float* h = smem;
  float* logits = h + a.J;
  float* dec = logits + a.V;
  float* pred = dec + a.J;
  RowDecoder<W, BlockExec>{a, ex, static_cast<int>(blockIdx.x), h, logits, dec, pred, window}
      .run();
}

template <class W>
int launch(const GreedyArgs<W>& a, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(scratch_floats(a.J, a.D, a.V)) * sizeof(float);
  if (smem > 48 * 1024) {
    OASR_CUDA_TRY(cudaFuncSetAttribute(greedy_decode_kernel<W>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  greedy_decode_kernel<W><<<a.B, kThreads, smem, stream>>>(a);
  OASR_RETURN_LAST_ERROR();
}

template <class W>
int decode(const void* enc, const int64_t* lengths, const void* embedding, const void* conv,
           const void* dec_w, const void* dec_b, const void* out_w, const void* out_b, int B,
           int T, int J, int D, int V, int C, int groups, int blank, int unk, int max_sym,
           int relu, int cap, int32_t* tokens, int32_t* frames, float* probs, int32_t* counts,
           float* scores, cudaStream_t stream) {
  const GreedyArgs<W> a{static_cast<const W*>(enc), lengths, static_cast<const W*>(embedding),
                        static_cast<const W*>(conv), static_cast<const W*>(dec_w),
                        static_cast<const W*>(dec_b), static_cast<const W*>(out_w),
                        static_cast<const W*>(out_b), B, T, J, D, V, C, groups, blank, unk,
                        max_sym, relu, cap, tokens, frames, probs, counts, scores};
  return launch(a, stream);
}

}  // namespace

// The dynamic shared memory one row needs and the device's limit for this kernel (static
// shared memory counted), so the binding can refuse a model that does not fit before launch.
OASR_API int oasr_transducer_greedy_smem(int J, int D, int V, int64_t* need, int64_t* limit) {
  cudaFuncAttributes attr;
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, greedy_decode_kernel<__half>));
  int device = 0, optin = 0;
  OASR_CUDA_TRY(cudaGetDevice(&device));
  OASR_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  *need = static_cast<int64_t>(scratch_floats(J, D, V)) * sizeof(float);
  *limit = static_cast<int64_t>(optin) - static_cast<int64_t>(attr.sharedSizeBytes);
  return 0;
}

// dtype: 0 fp32, 1 fp16, 2 bf16 (every tensor but lengths and the outputs in it). C in
// [1, 8]; groups divides D.
OASR_API int oasr_transducer_greedy_decode(const void* enc, const int64_t* lengths,
                                           const void* embedding, const void* conv,
                                           const void* dec_w, const void* dec_b,
                                           const void* out_w, const void* out_b, int B, int T,
                                           int J, int D, int V, int C, int groups, int blank,
                                           int unk, int max_sym, int relu, int cap,
                                           int32_t* tokens, int32_t* frames, float* probs,
                                           int32_t* counts, float* scores, int dtype,
                                           cudaStream_t stream) {
  if (B <= 0) return 0;
  if (C < 1 || C > kMaxContext || groups < 1 || D % groups || J < 1 || V < 1 || cap < 0 ||
      max_sym < 1 || (C > 1 && conv == nullptr)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
#define OASR_TRANSDUCER_ARGS                                                                   \
  enc, lengths, embedding, conv, dec_w, dec_b, out_w, out_b, B, T, J, D, V, C, groups, blank, \
      unk, max_sym, relu, cap, tokens, frames, probs, counts, scores, stream
  switch (dtype) {
    case 0: return decode<float>(OASR_TRANSDUCER_ARGS);
    case 1: return decode<__half>(OASR_TRANSDUCER_ARGS);
    case 2: return decode<__nv_bfloat16>(OASR_TRANSDUCER_ARGS);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
#undef OASR_TRANSDUCER_ARGS
}

OASR_EXPORT_SIGNATURES(transducer_cuda, OASR_SIGNATURE(oasr_transducer_greedy_smem),
                       OASR_SIGNATURE(oasr_transducer_greedy_decode))
