// The recurrent half of one LSTM / Elman-RNN layer direction, every time step in one launch.
//
// The input half of each step (x W_ih^T + b_ih + b_hh, for all steps) is one GEMM the caller
// has already made; what is left is inherently sequential: gates_t = xw_t + h_{t-1} W_hh^T,
// then the cell. One block per sequence keeps h in shared memory and the LSTM cell state in a
// register of the thread that owns that hidden unit, so a step costs two barriers and no
// launch. W_hh is read transposed, (H, G*H), so the threads of a block read consecutive
// columns (coalesced, L2-resident across steps and blocks). fp32 throughout: the recurrence is
// where rounding compounds.
//
// Variable lengths follow packed-sequence semantics: a sequence of length L runs steps
// 0..L-1 (reverse: L-1..0); outputs past L are zero and the final state is the state at L.
// Framework-free CUDA C++.
#pragma once

#include <cstdint>

namespace oasr::kernels::rnn {

enum Mode : int { kLstm = 0, kRnnTanh = 1, kRnnRelu = 2 };

struct RecurrenceArgs {
  const float* xw;         // (B, T, G*H) input half of every step, biases included
  const float* w_hh_t;     // (H, G*H)
  const float* h0;         // (B, H)
  const float* c0;         // (B, H), LSTM only
  const int64_t* lengths;  // (B,) or null: every sequence has T steps
  float* y;                // (B, T, H)
  float* h_n;              // (B, H)
  float* c_n;              // (B, H), LSTM only
  int T;
  int H;
  int reverse;
};

__device__ __forceinline__ float sigmoidf_(float v) { return 1.0f / (1.0f + __expf(-v)); }

template <int MODE>
__global__ void recurrence_kernel(RecurrenceArgs a) {
  constexpr int G = MODE == kLstm ? 4 : 1;
  extern __shared__ float smem[];
  const int H = a.H, GH = G * a.H, T = a.T;
  float* h = smem;           // [H]
  float* gates = smem + H;   // [G*H]
  const int b = blockIdx.x, tid = threadIdx.x;
  const int64_t len64 = a.lengths == nullptr ? T : a.lengths[b];
  const int len = len64 < 0 ? 0 : (len64 > T ? T : static_cast<int>(len64));
  const bool owner = tid < H;  // blockDim >= H: one hidden unit per owning thread
  float c = 0.0f, h_own = 0.0f;
  if (owner) {
    h_own = a.h0[static_cast<int64_t>(b) * H + tid];
    h[tid] = h_own;
    if (MODE == kLstm) c = a.c0[static_cast<int64_t>(b) * H + tid];
  }
  float* y_row = a.y + static_cast<int64_t>(b) * T * H;
  if (owner) {
    for (int t = len; t < T; ++t) y_row[static_cast<int64_t>(t) * H + tid] = 0.0f;
  }
  __syncthreads();
  const float* xw_row = a.xw + static_cast<int64_t>(b) * T * GH;
  for (int s = 0; s < len; ++s) {
    const int t = a.reverse ? len - 1 - s : s;
    const float* xt = xw_row + static_cast<int64_t>(t) * GH;
    for (int j = tid; j < GH; j += blockDim.x) {
      // four partial sums break the dependent FMA chain
      float acc0 = xt[j], acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
      const float* w = a.w_hh_t + j;
      int k = 0;
      for (; k + 4 <= H; k += 4) {
        acc0 = fmaf(h[k], __ldg(w + static_cast<int64_t>(k) * GH), acc0);
        acc1 = fmaf(h[k + 1], __ldg(w + static_cast<int64_t>(k + 1) * GH), acc1);
        acc2 = fmaf(h[k + 2], __ldg(w + static_cast<int64_t>(k + 2) * GH), acc2);
        acc3 = fmaf(h[k + 3], __ldg(w + static_cast<int64_t>(k + 3) * GH), acc3);
      }
      for (; k < H; ++k) acc0 = fmaf(h[k], __ldg(w + static_cast<int64_t>(k) * GH), acc0);
      gates[j] = (acc0 + acc1) + (acc2 + acc3);
    }
    __syncthreads();
    if (owner) {
      if (MODE == kLstm) {
        const float i = sigmoidf_(gates[tid]);
        const float f = sigmoidf_(gates[H + tid]);
        const float g = tanhf(gates[2 * H + tid]);
        const float o = sigmoidf_(gates[3 * H + tid]);
        c = f * c + i * g;
        h_own = o * tanhf(c);
      } else if (MODE == kRnnTanh) {
        h_own = tanhf(gates[tid]);
      } else {
        h_own = fmaxf(gates[tid], 0.0f);
      }
      h[tid] = h_own;
      y_row[static_cast<int64_t>(t) * H + tid] = h_own;
    }
    __syncthreads();
  }
  if (owner) {
    a.h_n[static_cast<int64_t>(b) * H + tid] = h_own;
    if (MODE == kLstm) a.c_n[static_cast<int64_t>(b) * H + tid] = c;
  }
}

}  // namespace oasr::kernels::rnn
