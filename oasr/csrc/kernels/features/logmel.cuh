// rfft output -> power (or magnitude) -> sparse mel filterbank -> log, one warp per frame, and
// Whisper's per-row dynamic-range clamp. Framework-free CUDA C++.
//
// Each mel filter is nonzero on one contiguous bin range, so the filterbank is stored as
// per-filter [start, start + len) with its weights packed (CSR-like): a frame costs its nonzero
// weights (~2 per bin) instead of n_bins * n_mels. Sums run in double whatever the spectrum's
// precision: the result is the exact weighted sum rounded once, as close to the torch GEMM as
// that GEMM is to the exact sum.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "features/framing.cuh"

namespace oasr::kernels::features {

enum LogKind : int { kLogNone = 0, kLogNatural = 1, kLog10 = 2 };

template <typename T>
struct Complex;
template <>
struct Complex<float> {
  using type = float2;
};
template <>
struct Complex<double> {
  using type = double2;
};

// One rounding per op, as torch's spec.real.square() + spec.imag.square().
__device__ __forceinline__ float power_of(float2 c) {
  return __fadd_rn(__fmul_rn(c.x, c.x), __fmul_rn(c.y, c.y));
}
__device__ __forceinline__ double power_of(double2 c) {
  return __dadd_rn(__dmul_rn(c.x, c.x), __dmul_rn(c.y, c.y));
}

// A float's bits mapped so unsigned order is float order (any sign): atomicMax works on it,
// and 0 sorts below every float, so a zeroed buffer is an empty max.
__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_order_key(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

template <typename T>
struct MelJob {
  const typename Complex<T>::type* spec;  // (frames, spec_stride) complex
  const int32_t* starts;                  // (n_mels,) first nonzero bin of each filter
  const int32_t* offsets;                 // (n_mels + 1,) into weights
  const T* weights;                       // packed nonzero ranges
  const int64_t* frame_lens;              // (rows,) or null: frames at or past it are zeroed
  float* out;                             // frame g's mel m at out[g * out_ld + m]
  unsigned* row_max;                      // (rows,) order keys of each row's max, or null
  int64_t frames_per_row;
  int64_t out_ld;
  int spec_stride;
  int n_bins;                             // the bins the filters read (a prefix of the rfft)
  int n_mels;
  int log_kind;
  float floor;                            // log(max(x, floor))
  bool magnitude;                         // sqrt of the power (Kaldi's use_power=false)
};

// Blocks of blockDim.x / 32 frames; dynamic shared memory holds n_bins T per warp.
template <typename T>
__global__ void mel_log_kernel(MelJob<T> p, int64_t n_frames) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + warp;
  if (g >= n_frames) return;  // warp-uniform; only __syncwarp below
  const int64_t b = g / p.frames_per_row;
  float* out = p.out + g * p.out_ld;
  if (p.frame_lens != nullptr && g - b * p.frames_per_row >= p.frame_lens[b]) {
    for (int m = lane; m < p.n_mels; m += kWarp) out[m] = 0.0f;
    return;
  }
  T* power = reinterpret_cast<T*>(smem_raw) + static_cast<int64_t>(warp) * p.n_bins;
  const typename Complex<T>::type* spec = p.spec + g * p.spec_stride;
#pragma unroll 4
  for (int k = lane; k < p.n_bins; k += kWarp) {  // unrolled: several loads in flight per lane
    const T pw = power_of(spec[k]);
    power[k] = p.magnitude ? sqrt(pw) : pw;
  }
  __syncwarp();
  float peak = -INFINITY;
  for (int m = lane; m < p.n_mels; m += kWarp) {
    const int start = p.starts[m];
    const int w0 = p.offsets[m];
    const int n = p.offsets[m + 1] - w0;
    double acc = 0.0;
    for (int j = 0; j < n; ++j) {
      acc = fma(static_cast<double>(p.weights[w0 + j]), static_cast<double>(power[start + j]), acc);
    }
    float v = static_cast<float>(acc);
    if (p.log_kind == kLogNatural) v = logf(fmaxf(v, p.floor));
    if (p.log_kind == kLog10) v = log10f(fmaxf(v, p.floor));
    out[m] = v;
    peak = fmaxf(peak, v);
  }
  if (p.row_max != nullptr) {
    peak = warp_max(peak);
    if (lane == 0) atomicMax(p.row_max + b, order_key(peak));
  }
}

__device__ __forceinline__ float whisper_scale(float x, float low) {
  return __fmul_rn(__fadd_rn(fmaxf(x, low), 4.0f), 0.25f);  // / 4 is exact
}

// Whisper's normalization: (max(x, row_max - range) + 4) / 4, in place, V floats a thread
// (float4 when a row holds a multiple of 4 and the buffer is 16-byte aligned).
template <typename V>
__global__ void whisper_normalize_kernel(V* feats, const unsigned* row_max, int64_t per_row,
                                         int64_t total, float range) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const float low = __fsub_rn(from_order_key(row_max[i / per_row]), range);
    V v = feats[i];
    float* f = reinterpret_cast<float*>(&v);
#pragma unroll
    for (int j = 0; j < kLanes; ++j) f[j] = whisper_scale(f[j], low);
    feats[i] = v;
  }
}

}  // namespace oasr::kernels::features
