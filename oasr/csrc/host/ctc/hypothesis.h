// A decoded CTC hypothesis and the pieces both CPU decoders share. Framework-free C++17.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace oasr::ctc {

struct Hypothesis {
  std::vector<int32_t> tokens;
  // Per token: the frame that emitted it on the hypothesis' best (Viterbi) path, recorded when
  // the token was appended, i.e. the first frame of its run.
  std::vector<int32_t> frames;
  // Per token: its posterior, max(p[t][tok], p[t + 1][tok]) at its emitting frame t (the beam
  // commits at the leading edge of a posterior peak, sometimes one frame early).
  std::vector<double> probs;
  double score = 0.0;  // log-probability (see greedy.h / prefix_beam.h for which)
};

// One row's log-probs: `length` valid frames of `vocab` floats, row-major.
struct RowView {
  const float* log_probs;
  int64_t length;
  int64_t vocab;

  const float* frame(int64_t t) const { return log_probs + t * vocab; }
};

// The largest of x[0..n) (NaNs ignored; -inf when n == 0 or all are NaN).
float max_value(const float* x, int64_t n);

// The first index of the largest of x[0..n), n >= 1 (0 when every entry is NaN).
int32_t argmax(const float* x, int64_t n);

// Fills h.probs from h.tokens and h.frames.
void fill_posteriors(const RowView& row, Hypothesis& h);

// Runs fn(b) for b in [0, rows) on up to num_threads threads (<= 1: the calling thread);
// rethrows the first exception a row raised.
template <class Fn>
void for_each_row(int64_t rows, int num_threads, Fn&& fn);

}  // namespace oasr::ctc

#include "ctc/parallel_impl.h"
