#include "alignment/dtw.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace oasr::alignment {

void dtw(const float* cost, int64_t n, int64_t m, std::vector<int32_t>& token_index,
         std::vector<int32_t>& frame_index) {
  if (n <= 0 || m <= 0) throw std::invalid_argument("dtw: empty cost matrix");
  const int64_t w = m + 1;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> acc(static_cast<std::size_t>((n + 1) * w), inf);
  std::vector<uint8_t> move(static_cast<std::size_t>((n + 1) * w), 0);
  acc[0] = 0.0f;
  for (int64_t j = 1; j <= m; ++j) {
    for (int64_t i = 1; i <= n; ++i) {
      const float diag = acc[(i - 1) * w + (j - 1)];
      const float up = acc[(i - 1) * w + j];
      const float left = acc[i * w + (j - 1)];
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
      acc[i * w + j] = cost[(i - 1) * m + (j - 1)] + best;
      move[i * w + j] = step;
    }
  }
  // Off the grid's first row only frame+1 moves remain, off its first column only token+1.
  token_index.clear();
  frame_index.clear();
  int64_t i = n, j = m;
  while (i > 0 || j > 0) {
    token_index.push_back(static_cast<int32_t>(i - 1));
    frame_index.push_back(static_cast<int32_t>(j - 1));
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
  std::reverse(token_index.begin(), token_index.end());
  std::reverse(frame_index.begin(), frame_index.end());
}

}  // namespace oasr::alignment
