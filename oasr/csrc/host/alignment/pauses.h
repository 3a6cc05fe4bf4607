// Token spans snapped to pauses: no token spans a stretch of silence.
//
// Cross-attention alignment smears a token across an adjacent pause (the last word of a
// sentence runs through the silence after it, and the next sentence's first word starts late).
// For each pause [ps, pe) (ordered, disjoint) and each token span [s, e) meeting it:
//   * a token continuing a word (punctuation, a word piece; not the first token) stays with
//     the speech before the pause: it ends at ps (collapsing to ps if it starts inside), and a
//     next token starting after the pause moves back to pe;
//   * otherwise a span inside the pause collapses to pe (the word starts with the speech);
//   * a span straddling the whole pause ends at ps and the next token starts at pe: the path
//     reaches a token after a pause late, so the straddler is the token before it;
//   * a span reaching into the pause from the left ends at ps; from the right starts at pe.
// Framework-free C++17; the Python oracle is in tests/engine/decode/test_alignment.py.
#pragma once

#include <cstddef>
#include <cstdint>

namespace oasr::alignment {

// joins_previous[k]: token k's piece does not start with whitespace (it continues a word).
void snap_to_pauses(double* starts, double* ends, const uint8_t* joins_previous,
                    std::size_t n_tokens, const double* pause_starts, const double* pause_ends,
                    std::size_t n_pauses);

}  // namespace oasr::alignment
