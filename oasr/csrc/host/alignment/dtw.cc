#include "alignment/dtw.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace oasr::alignment {

namespace {

// The accumulated-cost recursion; move[(i, j)] records the step into each cell (0 diagonal,
// 1 token+1, 2 frame+1). The grid is (n + 1) x (m + 1), its first row and column the borders.
void accumulate(const float* cost, int64_t n, int64_t m, int64_t row_stride,
                std::vector<float>& acc, std::vector<uint8_t>& move) {
  if (n <= 0 || m <= 0) throw std::invalid_argument("dtw: empty cost matrix");
  const int64_t w = m + 1;
  const float inf = std::numeric_limits<float>::infinity();
  acc.assign(static_cast<std::size_t>((n + 1) * w), inf);
  move.assign(static_cast<std::size_t>((n + 1) * w), 0);
  acc[0] = 0.0f;
  // Row by row: each cell reads only its three neighbours up and left, so the order of the
  // sweep does not change a value, and rows read the cost matrix contiguously.
  for (int64_t i = 1; i <= n; ++i) {
    const float* c = cost + (i - 1) * row_stride;
    const float* prev = acc.data() + (i - 1) * w;
    float* cur = acc.data() + i * w;
    uint8_t* mv = move.data() + i * w;
    for (int64_t j = 1; j <= m; ++j) {
      const float diag = prev[j - 1];
      const float up = prev[j];
      const float left = cur[j - 1];
      float best;
      uint8_t step;
      if (diag < up && diag < left) {
        best = diag;
        step = 0;
      } else if (up < diag && up < left) {
        best = up;
        step = 1;
      } else {
        best = left;
        step = 2;
      }
      cur[j] = c[j - 1] + best;
      mv[j] = step;
    }
  }
}

// Walks the path back from (n, m); visit(token, frame) sees each point, last to first. Off the
// grid's first row only frame+1 moves remain, off its first column only token+1.
template <class Visit>
void backtrace(const std::vector<uint8_t>& move, int64_t n, int64_t m, Visit&& visit) {
  const int64_t w = m + 1;
  int64_t i = n, j = m;
  while (i > 0 || j > 0) {
    visit(i - 1, j - 1);
    const uint8_t step = i == 0 ? 2 : j == 0 ? 1 : move[i * w + j];
    if (step == 0) {
      --i;
      --j;
    } else if (step == 1) {
      --i;
    } else {
      --j;
    }
  }
}

}  // namespace

void dtw(const float* cost, int64_t n, int64_t m, std::vector<int32_t>& token_index,
         std::vector<int32_t>& frame_index) {
  std::vector<float> acc;
  std::vector<uint8_t> move;
  accumulate(cost, n, m, m, acc, move);
  token_index.clear();
  frame_index.clear();
  backtrace(move, n, m, [&](int64_t t, int64_t f) {
    token_index.push_back(static_cast<int32_t>(t));
    frame_index.push_back(static_cast<int32_t>(f));
  });
  std::reverse(token_index.begin(), token_index.end());
  std::reverse(frame_index.begin(), frame_index.end());
}

void dtw_starts(const float* cost, int64_t n, int64_t m, int64_t row_stride, int32_t* starts) {
  std::vector<float> acc;
  std::vector<uint8_t> move;
  accumulate(cost, n, m, row_stride, acc, move);
  std::fill(starts, starts + n, -1);
  // Walking back, the last write to a row is the path's first point on it.
  backtrace(move, n, m, [&](int64_t t, int64_t f) {
    if (t >= 0) starts[t] = static_cast<int32_t>(f);
  });
}

void dtw_starts_batch(const float* cost, int64_t batch, int64_t max_n, int64_t max_m,
                      const int64_t* n, const int64_t* m, int32_t* starts) {
  for (int64_t b = 0; b < batch; ++b) {
    if (n[b] < 1 || n[b] > max_n || m[b] < 1 || m[b] > max_m) {
      throw std::invalid_argument("dtw_starts_batch: a row's lengths are outside [1, max]");
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    int32_t* out = starts + b * max_n;
    std::fill(out, out + max_n, -1);
    dtw_starts(cost + b * max_n * max_m, n[b], m[b], max_m, out);
  }
}

}  // namespace oasr::alignment
