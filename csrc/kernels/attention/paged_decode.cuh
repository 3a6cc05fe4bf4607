// Decode-step attention over a paged KV cache: one query per row and head against the keys a
// block table names. Framework-free CUDA C++.
//
// Layout: q (B, H, D) with strides; k/v cache (num_blocks, block_size, H_kv, D) contiguous;
// table (B, W) int64 block ids; per row the visible keys are [start, min(len, L)) with
// L = width (or W * block_size). Output (B, H, D) contiguous; a row with no visible key is 0.
//
// One block per (head, row). Groups of D / 8 threads each read one key's 16-byte slices, so a
// key is one coalesced 2*D-byte read; scores go to shared memory (L floats), softmax in fp32,
// then each group accumulates p * V over its share of the keys and the groups are summed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace oasr::kernels::attention {

constexpr int kThreads = 128;

template <typename T>
struct Vec8;  // eight elements, 16 bytes
template <>
struct Vec8<__half> {
  static __device__ __forceinline__ void to_float(const uint4& u, float* f) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __half22float2(h[i]);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
  static __device__ __forceinline__ uint4 from_float(const float* f) {
    uint4 u;
    __half2* h = reinterpret_cast<__half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
    return u;
  }
};
template <>
struct Vec8<__nv_bfloat16> {
  static __device__ __forceinline__ void to_float(const uint4& u, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __bfloat1622float2(h[i]);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
  static __device__ __forceinline__ uint4 from_float(const float* f) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return u;
  }
};

struct PagedDecodeArgs {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  const int64_t* table;
  const int64_t* lens;    // nullable: every key up to L
  const int64_t* starts;  // nullable: from key 0
  void* out;
  int64_t q_stride_b, q_stride_h;  // elements
  int H, H_kv, W, block_size, L;
  float scale;
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) paged_decode_kernel(PagedDecodeArgs a) {
  constexpr int G = D / 8;               // threads per key
  constexpr int KEYS = kThreads / G;     // keys per pass
  extern __shared__ float scores[];      // L floats
  __shared__ float red[kThreads / 32];
  __shared__ float part[KEYS][D];

  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int g = tid % G, key_lane = tid / G;
  const int hk = h / (a.H / a.H_kv);
  int end = a.L;
  if (a.lens != nullptr && a.lens[b] < end) end = static_cast<int>(a.lens[b]);
  const int start =
      (a.starts != nullptr && a.starts[b] > 0) ? static_cast<int>(a.starts[b]) : 0;
  T* out = static_cast<T*>(a.out) + (static_cast<int64_t>(b) * a.H + h) * D;
  if (end <= start) {
    if (tid < G) {
      float z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      reinterpret_cast<uint4*>(out)[tid] = Vec8<T>::from_float(z);
    }
    return;
  }

  float q[8];
  const T* qp = static_cast<const T*>(a.q) + b * a.q_stride_b + h * a.q_stride_h;
  Vec8<T>::to_float(reinterpret_cast<const uint4*>(qp)[g], q);
  const int64_t* table = a.table + static_cast<int64_t>(b) * a.W;
  const int64_t row_elems = static_cast<int64_t>(a.H_kv) * D;
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);

  // Scores.
  float local_max = -INFINITY;
  for (int j0 = start; j0 < end; j0 += KEYS) {
    const int j = j0 + key_lane;
    float s = 0.0f;
    if (j < end) {
      const int64_t blk = table[j / a.block_size];
      const int64_t pos = blk * a.block_size + j % a.block_size;
      float kf[8];
      Vec8<T>::to_float(reinterpret_cast<const uint4*>(kc + pos * row_elems + hk * D)[g], kf);
#pragma unroll
      for (int i = 0; i < 8; ++i) s += q[i] * kf[i];
    }
#pragma unroll
    for (int off = G / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (j < end && g == 0) {
      s *= a.scale;
      scores[j - start] = s;
      local_max = fmaxf(local_max, s);
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, off));
  }
  if ((tid & 31) == 0) red[tid >> 5] = local_max;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, red[w]);
  __syncthreads();

  // Softmax weights.
  const int n = end - start;
  float local_sum = 0.0f;
  for (int j = tid; j < n; j += kThreads) {
    const float p = __expf(scores[j] - m);
    scores[j] = p;
    local_sum += p;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) local_sum += __shfl_xor_sync(0xffffffffu, local_sum, off);
  if ((tid & 31) == 0) red[tid >> 5] = local_sum;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += red[w];

  // p . V: group key_lane takes keys start + key_lane, + KEYS, ...; thread g its 8 dims.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j = start + key_lane; j < end; j += KEYS) {
    const int64_t blk = table[j / a.block_size];
    const int64_t pos = blk * a.block_size + j % a.block_size;
    float vf[8];
    Vec8<T>::to_float(reinterpret_cast<const uint4*>(vc + pos * row_elems + hk * D)[g], vf);
    const float p = scores[j - start];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += p * vf[i];
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) part[key_lane][g * 8 + i] = acc[i];
  __syncthreads();
  if (tid < D) {
    float o = 0.0f;
#pragma unroll 4
    for (int r = 0; r < KEYS; ++r) o += part[r][tid];
    out[tid] = static_cast<T>(o / total);
  }
}

}  // namespace oasr::kernels::attention
