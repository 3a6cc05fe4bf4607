// Each frame's top-k tokens for the CTC prefix beam search. Framework-free CUDA C++.
//
// Order: value descending, then id ascending (the CPU search's `select`); NaNs are never
// selected, so a frame may yield fewer than k ids. One block per (frame, row):
//   1. the k-th largest value is bounded from below by min over k groups of the group's max
//      (the vocabulary in 32-wide chunks dealt round-robin to k groups: each group holds a value
//      at least that large), so only elements reaching the bound are candidates;
//   2. the candidates (about k on real log-probs) are ranked against each other;
//   3. when too many tie at the bound (e.g. a frame of -inf), k exact selection passes over the
//      whole frame take over.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>
#include <math_constants.h>

namespace oasr::kernels::ctc {

constexpr int kTopkThreads = 128;
constexpr int kTopkCandidates = 1024;
constexpr int kMaxBeam = 32;

__device__ __forceinline__ bool topk_better(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// Order-preserving float -> uint32 (larger float, larger key); NaN never reaches it.
__device__ __forceinline__ unsigned float_key(float x) {
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The search's per-frame input, gathered here so the sequential beam kernel reads it in one
// round trip (and prefetches the next frame's while it decodes this one).
struct FrameTops {
  int32_t* ids;     // (B, T, k): the frame's top tokens, best first
  float* vals;      // (B, T, k): their log-probs
  float* next;      // (B, T, k): their log-probs at frame t + 1 (NaN past the row's frames)
  int32_t* count;   // (B, T): how many of the k are set (fewer only when NaNs abound)
  float* blank_lp;  // (B, T): the blank's log-prob (for blank skipping)
};

// log_probs (B, T, V); lens (B,).
__global__ void __launch_bounds__(kTopkThreads)
frame_topk_kernel(const float* __restrict__ log_probs, const int64_t* __restrict__ lens, int T,
                  int V, int k, int blank, FrameTops tops) {
  const int t = blockIdx.x, b = blockIdx.y;
  const int64_t len = lens[b];
  if (t >= len || len > T) return;
  int32_t* __restrict__ top_ids = tops.ids;
  float* __restrict__ top_vals = tops.vals;
  const float* x = log_probs + (static_cast<int64_t>(b) * T + t) * V;
  const int64_t out = (static_cast<int64_t>(b) * T + t);

  __shared__ unsigned group_max[kMaxBeam];
  __shared__ unsigned floor_key;
  __shared__ int n_cand;
  __shared__ float cand_v[kTopkCandidates];
  __shared__ int cand_i[kTopkCandidates];
  __shared__ float red_v[kTopkThreads / 32];
  __shared__ int red_i[kTopkThreads / 32];

  const int tid = threadIdx.x;
  const int chunks = (V + 31) / 32;
  if (tid < kMaxBeam) group_max[tid] = 0u;  // below every float's key
  if (tid == 0) n_cand = 0;
  __syncthreads();

  if (chunks >= k) {
    // A warp reads one 32-wide chunk at a time: its max, then one atomic per chunk.
    const int lane = tid & 31;
    for (int c = tid >> 5; c < chunks; c += kTopkThreads / 32) {
      const int v = c * 32 + lane;
      const float xv = v < V ? x[v] : CUDART_NAN_F;
      unsigned key = xv == xv ? float_key(xv) : 0u;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) key = max(key, __shfl_xor_sync(0xffffffffu, key, off));
      if (lane == 0 && key != 0u) atomicMax(&group_max[c % k], key);
    }
    __syncthreads();
    if (tid == 0) {
      unsigned m = 0xffffffffu;
      for (int g = 0; g < k; ++g) m = min(m, group_max[g]);
      floor_key = m;  // 0 (no bound) when a group holds only NaNs
    }
  } else if (tid == 0) {
    floor_key = 0u;
  }
  __syncthreads();

  const unsigned fk = floor_key;
  for (int v = tid; v < V; v += kTopkThreads) {
    const float xv = x[v];
    if (xv == xv && float_key(xv) >= fk) {
      const int slot = atomicAdd(&n_cand, 1);
      if (slot < kTopkCandidates) {
        cand_v[slot] = xv;
        cand_i[slot] = v;
      }
    }
  }
  __syncthreads();
  const int n = n_cand;

  if (n <= kTopkCandidates) {
    for (int c = tid; c < n; c += kTopkThreads) {
      const float cv = cand_v[c];
      const int ci = cand_i[c];
      int rank = 0;
      for (int o = 0; o < n; ++o) rank += topk_better(cand_v[o], cand_i[o], cv, ci);
      if (rank < k) {
        top_ids[out * k + rank] = ci;
        top_vals[out * k + rank] = cv;
        tops.next[out * k + rank] = t + 1 < len ? x[V + ci] : CUDART_NAN_F;
      }
    }
    if (tid == 0) {
      tops.count[out] = n < k ? n : k;
      tops.blank_lp[out] = x[blank];
    }
    return;
  }

  // Too many ties at the bound: k passes, each taking the best element below the last taken.
  float prev_v = 0.0f;
  int prev_i = -1;
  int found = 0;
  for (int r = 0; r < k; ++r) {
    float best_v = 0.0f;
    int best_i = -1;
    for (int v = tid; v < V; v += kTopkThreads) {
      const float xv = x[v];
      if (xv != xv) continue;
      if (prev_i >= 0 && !topk_better(prev_v, prev_i, xv, v)) continue;
      if (best_i < 0 || topk_better(xv, v, best_v, best_i)) {
        best_v = xv;
        best_i = v;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_down_sync(0xffffffffu, best_v, off);
      const int oi = __shfl_down_sync(0xffffffffu, best_i, off);
      if (oi >= 0 && (best_i < 0 || topk_better(ov, oi, best_v, best_i))) {
        best_v = ov;
        best_i = oi;
      }
    }
    if ((tid & 31) == 0) {
      red_v[tid >> 5] = best_v;
      red_i[tid >> 5] = best_i;
    }
    __syncthreads();
    if (tid == 0) {
      for (int w = 1; w < kTopkThreads / 32; ++w) {
        if (red_i[w] >= 0 && (red_i[0] < 0 || topk_better(red_v[w], red_i[w], red_v[0],
                                                          red_i[0]))) {
          red_v[0] = red_v[w];
          red_i[0] = red_i[w];
        }
      }
    }
    __syncthreads();
    prev_v = red_v[0];
    prev_i = red_i[0];
    __syncthreads();
    if (prev_i < 0) break;
    if (tid == 0) {
      top_ids[out * k + r] = prev_i;
      top_vals[out * k + r] = prev_v;
      tops.next[out * k + r] = t + 1 < len ? x[V + prev_i] : CUDART_NAN_F;
    }
    found = r + 1;
  }
  if (tid == 0) {
    tops.count[out] = found;
    tops.blank_lp[out] = x[blank];
  }
}

}  // namespace oasr::kernels::ctc
