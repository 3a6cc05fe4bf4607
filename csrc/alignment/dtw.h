// Dynamic time warping over a (tokens x frames) cost matrix: the monotone path Whisper's
// word timings read token boundaries from. Framework-free C++17.
#pragma once

#include <cstdint>
#include <vector>

namespace oasr::alignment {

// cost: row-major (n, m). Fills the path as parallel (token, frame) index lists, from (0, 0) to
// (n - 1, m - 1). Steps are diagonal, token+1 or frame+1; a strict minimum picks the diagonal
// first, then token+1, and any tie goes to frame+1.
void dtw(const float* cost, int64_t n, int64_t m, std::vector<int32_t>& token_index,
         std::vector<int32_t>& frame_index);

}  // namespace oasr::alignment
