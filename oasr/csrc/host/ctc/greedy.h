// CTC greedy (best-path) decoding. Framework-free C++17.
#pragma once

#include <cstdint>
#include <vector>

#include "ctc/hypothesis.h"

namespace oasr::ctc {

// The per-frame argmax (lowest id on a tie), repeats collapsed, blanks removed. Each token's
// frame is the first of its run; score is the best path's log-probability (the sum of the
// per-frame maxima, accumulated in double).
Hypothesis greedy_row(const RowView& row, int32_t blank);

// log_probs: (B, T, V) row-major; lengths: (B,), each in [0, T].
std::vector<Hypothesis> greedy(const float* log_probs, const int64_t* lengths, int64_t batch,
                               int64_t frames, int64_t vocab, int32_t blank, int num_threads);

}  // namespace oasr::ctc
