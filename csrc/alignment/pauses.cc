#include "alignment/pauses.h"

namespace oasr::alignment {

void snap_to_pauses(double* starts, double* ends, std::size_t n, const double* pause_starts,
                    const double* pause_ends, std::size_t n_pauses) {
  for (std::size_t p = 0; p < n_pauses; ++p) {
    const double ps = pause_starts[p];
    const double pe = pause_ends[p];
    for (std::size_t k = 0; k < n; ++k) {
      const double s = starts[k];
      const double e = ends[k];
      if (e <= ps || s >= pe) continue;
      if (s >= ps && e <= pe) continue;
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
