// Per-token fp8 (e4m3) quantization of an (M, K) activation block, one pass per row:
// scale[m] = max(|x[m, :]|, 1e-12) * (1 / 448), q[m, k] = e4m3(clamp(x[m, k] / scale[m], +-448)),
// rounded to nearest even. The arithmetic is oasr.quantization.numerics.quantize_rows_fp8 in
// fp32 (IEEE division, not the fast reciprocal), so the two agree bit for bit. One warp per row:
// the absmax is a register max then a shuffle reduction (no shared memory, no block barrier),
// and the second read of the row comes from cache. Framework-free CUDA C++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace oasr::kernels::quantization {

constexpr float kFp8Max = 448.0f;  // the largest finite e4m3 (fn) value
constexpr float kTinyScale = 1e-12f;  // an all-zero row's absmax floor
constexpr int kWarp = 32;

__device__ __forceinline__ float load_float(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_float(const __half* p) { return __half2float(__ldg(p)); }
__device__ __forceinline__ float load_float(const __nv_bfloat16* p) {
  return __bfloat162float(__ldg(p));
}

// max and clamp that keep a NaN, as torch's amax and clamp do (fmaxf/fminf drop it).
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || isnan(a)) ? a : b; }
__device__ __forceinline__ float nan_clamp(float v, float lim) {
  return isnan(v) ? v : fminf(fmaxf(v, -lim), lim);
}

template <class T>
struct RowsFp8Args {
  const T* x;        // (rows, cols), row stride ld elements, unit column stride
  __nv_fp8_e4m3* q;  // (rows, cols) contiguous
  float* scales;     // (rows,)
  int64_t rows, cols, ld;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// The store of VEC e4m3 bytes (VEC = 16 / sizeof(T): 4 for fp32, 8 for fp16/bf16).
template <int VEC>
struct Fp8Store;
template <>
struct Fp8Store<4> { using type = unsigned int; };
template <>
struct Fp8Store<8> { using type = uint2; };

// Block: WARPS warps, one row each; grid: ceil(rows / WARPS). VECTOR: each lane moves 16 bytes
// of the row a load (the launcher checks cols and ld are multiples of 16 / sizeof(T) and x is
// 16-byte aligned), so a warp has 512 bytes in flight per load, not 32 elements.
template <class T, int WARPS, bool VECTOR>
__global__ void __launch_bounds__(WARPS * kWarp)
    quantize_rows_fp8_kernel(const RowsFp8Args<T> a) {
  constexpr int kVec = VECTOR ? 16 / static_cast<int>(sizeof(T)) : 1;
  constexpr int64_t kStride = static_cast<int64_t>(kWarp) * kVec;
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * WARPS + threadIdx.x / kWarp;
  if (row >= a.rows) return;  // whole warps leave together
  const T* x = a.x + row * a.ld;
  float amax = 0.0f;
  for (int64_t c = lane * kVec; c < a.cols; c += kStride) {
    if constexpr (VECTOR) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(x + c));
      const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) amax = nan_max(fabsf(to_float(v[j])), amax);
    } else {
      amax = nan_max(fabsf(load_float(x + c)), amax);
    }
  }
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) {
    amax = nan_max(__shfl_xor_sync(0xffffffffu, amax, off), amax);
  }
  // torch divides by a scalar as a product with its fp32 reciprocal.
  const float scale = __fmul_rn(nan_max(amax, kTinyScale), 1.0f / kFp8Max);
  if (lane == 0) a.scales[row] = scale;
  __nv_fp8_e4m3* q = a.q + row * a.cols;
  for (int64_t c = lane * kVec; c < a.cols; c += kStride) {
    if constexpr (VECTOR) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(x + c));
      const T* v = reinterpret_cast<const T*>(&raw);
      using Store = typename Fp8Store<kVec>::type;
      union {
        Store word;
        __nv_fp8_e4m3 byte[kVec];
      } out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out.byte[j] = __nv_fp8_e4m3(nan_clamp(__fdiv_rn(to_float(v[j]), scale), kFp8Max));
      }
      *reinterpret_cast<Store*>(q + c) = out.word;
    } else {
      const float v = nan_clamp(__fdiv_rn(load_float(x + c), scale), kFp8Max);
      q[c] = __nv_fp8_e4m3(v);  // round to nearest even (satfinite: in range already)
    }
  }
}

}  // namespace oasr::kernels::quantization
