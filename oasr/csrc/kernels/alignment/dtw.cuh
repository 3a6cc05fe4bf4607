// Batched DTW over ragged (tokens x frames) cost matrices: one thread block per matrix sweeps
// the anti-diagonals of the accumulated-cost grid (every cell of a diagonal depends only on the
// two before it), then one thread walks the path back. Framework-free CUDA C++.
//
// The recursion is oasr/csrc/host/alignment/dtw.cc's, cell for cell: acc(0, 0) = 0, the rest of the
// grid's first row and column +inf, acc(i, j) = cost(i-1, j-1) + the strict minimum of
// (diagonal, token+1, frame+1) in that order of preference, any tie going to frame+1. One fp32
// add per cell in both, so the paths are equal, not close.
#pragma once

#include <cstdint>

namespace oasr::kernels::alignment {

enum DtwStep : uint8_t { kDiagonal = 0, kToken = 1, kFrame = 2 };

struct DtwArgs {
  const float* cost;     // (batch, max_n, max_m), row b's matrix in its top-left corner
  const int64_t* rows;   // (batch,) n[b] in [1, max_n]
  const int64_t* frames; // (batch,) m[b] in [1, max_m]
  uint8_t* move;         // (batch, max_n + 1, max_m + 1) workspace: the step into each cell
  int32_t* starts;       // (batch, max_n): the frame where the path first reaches each row
  int max_n;
  int max_m;
};

// Dynamic shared memory: three diagonals of (max_n + 1) floats, indexed by the token row.
__global__ void dtw_starts_kernel(DtwArgs a) {
  extern __shared__ float diagonals[];
  const int b = blockIdx.x;
  const int n = static_cast<int>(a.rows[b]);
  const int m = static_cast<int>(a.frames[b]);
  const int width = a.max_n + 1;
  float* two_back = diagonals;
  float* one_back = diagonals + width;
  float* here = diagonals + 2 * width;
  const float* cost = a.cost + static_cast<int64_t>(b) * a.max_n * a.max_m;
  const int64_t grid_w = a.max_m + 1;
  uint8_t* move = a.move + static_cast<int64_t>(b) * width * grid_w;
  int32_t* starts = a.starts + static_cast<int64_t>(b) * a.max_n;
  for (int i = threadIdx.x; i < a.max_n; i += blockDim.x) starts[i] = -1;
  const float inf = __int_as_float(0x7f800000);
  for (int d = 0; d <= n + m; ++d) {
    const int lo = d - m > 0 ? d - m : 0;
    const int hi = d < n ? d : n;
    for (int i = lo + threadIdx.x; i <= hi; i += blockDim.x) {
      const int j = d - i;
      float value;
      if (i == 0 || j == 0) {
        value = d == 0 ? 0.0f : inf;
      } else {
        const float diag = two_back[i - 1];
        const float up = one_back[i - 1];
        const float left = one_back[i];
        float best;
        uint8_t step;
        if (diag < up && diag < left) {
          best = diag;
          step = kDiagonal;
        } else if (up < diag && up < left) {
          best = up;
          step = kToken;
        } else {
          best = left;
          step = kFrame;
        }
        value = __fadd_rn(cost[static_cast<int64_t>(i - 1) * a.max_m + (j - 1)], best);
        move[i * grid_w + j] = step;
      }
      here[i] = value;
    }
    __syncthreads();  // this diagonal is complete before the next reads it
    float* spare = two_back;
    two_back = one_back;
    one_back = here;
    here = spare;
  }
  if (threadIdx.x != 0) return;
  // Walking back from (n, m), the last write to a row is the path's first point on it. Off the
  // grid's first row only frame+1 moves remain, off its first column only token+1.
  int i = n, j = m;
  while (i > 0 || j > 0) {
    if (i > 0) starts[i - 1] = j - 1;
    const uint8_t step = i == 0 ? kFrame : j == 0 ? kToken : move[i * grid_w + j];
    if (step == kDiagonal) {
      --i;
      --j;
    } else if (step == kToken) {
      --i;
    } else {
      --j;
    }
  }
}

}  // namespace oasr::kernels::alignment
