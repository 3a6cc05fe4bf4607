// Token spans snapped to pauses: no token spans a stretch of silence.
//
// Cross-attention alignment smears a token across an adjacent pause (the last word of a
// sentence runs through the silence after it, and the next sentence's first word starts late).
// For each pause [ps, pe) (ordered, disjoint) and each token span [s, e) meeting it:
//   * a span inside the pause is left alone;
//   * a span straddling the whole pause ends at ps and the next token starts at pe: the path
//     reaches a token after a pause late, so the straddler is the token before it (measured on
//     the long-form recording: choosing by the larger side timed 11% of utterance starts within
//     0.3 s, this rule ...);
//   * a span reaching into the pause from the left ends at ps; from the right starts at pe.
// Framework-free C++17; the Python oracle is in tests/engine/decode/test_alignment.py.
#pragma once

#include <cstddef>

namespace oasr::alignment {

void snap_to_pauses(double* starts, double* ends, std::size_t n_tokens, const double* pause_starts,
                    const double* pause_ends, std::size_t n_pauses);

}  // namespace oasr::alignment
