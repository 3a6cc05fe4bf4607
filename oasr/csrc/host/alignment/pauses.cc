#include "alignment/pauses.h"

namespace oasr::alignment {

void snap_to_pauses(double* starts, double* ends, const uint8_t* joins_previous, std::size_t n,
                    const double* pause_starts, const double* pause_ends, std::size_t n_pauses) {
  for (std::size_t p = 0; p < n_pauses; ++p) {
    const double ps = pause_starts[p];
    const double pe = pause_ends[p];
    for (std::size_t k = 0; k < n; ++k) {
      const double s = starts[k];
      const double e = ends[k];
      if (e <= ps || s >= pe) continue;
      if (joins_previous[k] && k > 0) {
        // A token continuing a word (punctuation, a word piece) stays with the speech before
        // the pause; the speech after it belongs to the next word.
        if (s < ps) {
          ends[k] = ps;
        } else {
          starts[k] = ends[k] = ps;
        }
        if (k + 1 < n && starts[k + 1] > pe) starts[k + 1] = pe;
        continue;
      }
      if (s >= ps && e <= pe) {
        // Nothing is spoken in a pause: a word's first token placed there starts the speech
        // after it.
        starts[k] = ends[k] = pe;
        continue;
      }
      if (s < ps && e > pe) {
        ends[k] = ps;
        if (k + 1 < n && ends[k + 1] > pe) starts[k + 1] = pe;
      } else if (s < ps) {
        ends[k] = ps;
      } else {
        starts[k] = pe;
      }
    }
  }
}

}  // namespace oasr::alignment
