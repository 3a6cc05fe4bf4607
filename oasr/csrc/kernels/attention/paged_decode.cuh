// Decode-step attention over a paged KV cache: one query per row and head against the keys a
// block table names. Framework-free CUDA C++.
//
// Layout: q (B, H, D) with strides; k/v cache (num_blocks, block_size, H_kv, D) contiguous;
// table (B, W) int64 block ids; per row the visible keys are [start, min(len, L)) with
// L = width (or W * block_size). Output (B, H, D) contiguous; a row with no visible key is 0.
//
// Split over the keys (flash-decoding): block (head, row, split) takes one contiguous share of
// the row's keys, so a batch of 64 rows x 6 heads still fills the GPU with the 1500 keys of a
// cross-attention. Groups of D / 8 threads each read one key's 16-byte slices (a key is one
// coalesced 2*D-byte read), four keys in flight per group; scores go to shared memory, the
// split's softmax statistics (max, sum) and its p . V in fp32 to a workspace, and a second
// kernel combines the splits of each (row, head).
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
  float* ws_max;          // (B, H, S)
  float* ws_sum;          // (B, H, S)
  float* ws_acc;          // (B, H, S, D)
  int64_t q_stride_b, q_stride_h;  // elements
  int H, H_kv, W, block_size, L, splits, split_keys;
  float scale;
};

constexpr int kUnroll = 4;

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) paged_decode_split_kernel(PagedDecodeArgs a) {
  constexpr int G = D / 8;               // threads per key
  constexpr int KEYS = kThreads / G;     // keys per pass
  extern __shared__ float scores[];      // split_keys floats
  __shared__ float red[kThreads / 32];
  __shared__ float part[KEYS][D];

  const int h = blockIdx.x, b = blockIdx.y, sp = blockIdx.z, tid = threadIdx.x;
  const int g = tid % G, key_lane = tid / G;
  const int hk = h / (a.H / a.H_kv);
  int end = a.L;
  if (a.lens != nullptr && a.lens[b] < end) end = static_cast<int>(a.lens[b]);
  int start =
      (a.starts != nullptr && a.starts[b] > 0) ? static_cast<int>(a.starts[b]) : 0;
  start += sp * a.split_keys;
  end = min(end, start + a.split_keys);
  const int64_t ws = (static_cast<int64_t>(b) * a.H + h) * a.splits + sp;
  if (end <= start) {
    if (tid == 0) {
      a.ws_max[ws] = -INFINITY;
      a.ws_sum[ws] = 0.0f;
    }
    if (tid < D) a.ws_acc[ws * D + tid] = 0.0f;
    return;
  }

  float q[8];
  const T* qp = static_cast<const T*>(a.q) + b * a.q_stride_b + h * a.q_stride_h;
  Vec8<T>::to_float(reinterpret_cast<const uint4*>(qp)[g], q);
  const int64_t* table = a.table + static_cast<int64_t>(b) * a.W;
  const int64_t row_elems = static_cast<int64_t>(a.H_kv) * D;
  const T* kc = static_cast<const T*>(a.k_cache) + hk * D;
  const T* vc = static_cast<const T*>(a.v_cache) + hk * D;
  auto key_at = [&](int j) -> int64_t {
    return (table[j / a.block_size] * a.block_size + j % a.block_size) * row_elems;
  };

  // Scores, kUnroll keys in flight per group.
  float local_max = -INFINITY;
  for (int j0 = start; j0 < end; j0 += KEYS * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * KEYS + key_lane;
      raw[u] = j < end ? reinterpret_cast<const uint4*>(kc + key_at(j))[g] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * KEYS + key_lane;
      float kf[8];
      Vec8<T>::to_float(raw[u], kf);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) s += q[i] * kf[i];
#pragma unroll
      for (int off = G / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if (j < end && g == 0) {
        s *= a.scale;
        scores[j - start] = s;
        local_max = fmaxf(local_max, s);
      }
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
  __syncthreads();  // also publishes the weights

  // p . V: group key_lane takes keys start + key_lane, + KEYS, ...; thread g its 8 dims.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j0 = start + key_lane; j0 < end; j0 += KEYS * kUnroll) {
    uint4 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * KEYS;
      raw[u] = j < end ? reinterpret_cast<const uint4*>(vc + key_at(j))[g] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * KEYS;
      if (j < end) {
        float vf[8];
        Vec8<T>::to_float(raw[u], vf);
        const float p = scores[j - start];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += p * vf[i];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) part[key_lane][g * 8 + i] = acc[i];
  __syncthreads();
  if (tid < D) {
    float o = 0.0f;
#pragma unroll 4
    for (int r = 0; r < KEYS; ++r) o += part[r][tid];
    a.ws_acc[ws * D + tid] = o;
  }
  if (tid == 0) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) total += red[w];
    a.ws_max[ws] = m;
    a.ws_sum[ws] = total;
  }
}

// out[b, h] = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M); zeros where no key was seen.
template <typename T, int D>
__global__ void paged_decode_combine_kernel(PagedDecodeArgs a) {
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const int64_t ws = (static_cast<int64_t>(b) * a.H + h) * a.splits;
  float m = -INFINITY;
  for (int s = 0; s < a.splits; ++s) m = fmaxf(m, a.ws_max[ws + s]);
  float num = 0.0f, den = 0.0f;
  if (m != -INFINITY) {
    for (int s = 0; s < a.splits; ++s) {
      const float w = __expf(a.ws_max[ws + s] - m);  // an empty split: e^-inf = 0
      num += w * a.ws_acc[(ws + s) * D + d];
      den += w * a.ws_sum[ws + s];
    }
  }
  T* out = static_cast<T*>(a.out) + (static_cast<int64_t>(b) * a.H + h) * D;
  out[d] = static_cast<T>(den > 0.0f ? num / den : 0.0f);
}

}  // namespace oasr::kernels::attention
