// CTC prefix beam search, WeNet's `ctc_prefix_beam_search` semantics. Framework-free C++17.
//
// Per decoded frame t:
//   1. the frame's top `beam_size` tokens are taken (fewer when the vocabulary is smaller; a
//      tie goes to the lower id), in descending log-prob;
//   2. every (token u, live prefix h) pair, tokens outer and prefixes inner in beam order,
//      updates the next frame's prefixes, with pb/pnb the log-probabilities of the prefix's
//      paths ending in blank / in its last token:
//        u == blank:       pb(h)    += (pb(h) + pnb(h)) * p          (log-add-exp throughout)
//        u == last(h):     pnb(h)   += pnb(h) * p;   pnb(h+u) += pb(h) * p
//        otherwise:        pnb(h+u) += (pb(h) + pnb(h)) * p;
//      a prefix reached from two places merges (one entry per distinct token sequence);
//   3. the `beam_size` prefixes of highest logaddexp(pb, pnb) survive, sorted descending; equal
//      scores keep the order in which step 2 first touched them (a stable sort).
// Prefixes of probability zero are dropped rather than kept as filler.
//
// Beside pb/pnb each prefix carries the Viterbi (max) scores of the same two path sets and the
// emitting frame of every token on those best paths: a token's frame is recorded when it is
// appended (the first frame of its run) and is never re-derived from the log-probs.
//
// Blank skipping: a frame whose blank probability exceeds `blank_skip_threshold` is not
// decoded (its probability is left out of every score). When the next decoded frame's argmax
// is a non-blank equal to the previous decoded frame's argmax and the frame just before it was
// skipped, the last skipped frame is decoded first, so a blank-separated repeat ("a _ a")
// survives the skip instead of collapsing. A threshold >= 1 never skips.
#pragma once

#include <cstdint>
#include <vector>

#include "ctc/hypothesis.h"

namespace oasr::ctc {

struct PrefixBeamOptions {
  int32_t blank = 0;
  int32_t beam_size = 10;
  double blank_skip_threshold = 1.0;
  int32_t nbest = 1;  // hypotheses returned per row (at most beam_size, fewer if fewer live)
};

// The row's surviving prefixes, best first; score = logaddexp(pb, pnb) over decoded frames.
std::vector<Hypothesis> prefix_beam_row(const RowView& row, const PrefixBeamOptions& options);

// log_probs: (B, T, V) row-major; lengths: (B,), each in [0, T].
std::vector<std::vector<Hypothesis>> prefix_beam(const float* log_probs, const int64_t* lengths,
                                                 int64_t batch, int64_t frames, int64_t vocab,
                                                 const PrefixBeamOptions& options,
                                                 int num_threads);

}  // namespace oasr::ctc
