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

// The same path, reported as what the word pass reads: starts[i] = the frame where the path
// first reaches token row i (n entries). cost rows are `row_stride` floats apart (>= m).
void dtw_starts(const float* cost, int64_t n, int64_t m, int64_t row_stride, int32_t* starts);

// A batch of ragged matrices in one padded (batch, max_n, max_m) block: row b is the top-left
// (n[b], m[b]) corner of cost[b]; starts is (batch, max_n), entries past n[b] set to -1.
void dtw_starts_batch(const float* cost, int64_t batch, int64_t max_n, int64_t max_m,
                      const int64_t* n, const int64_t* m, int32_t* starts);

}  // namespace oasr::alignment
