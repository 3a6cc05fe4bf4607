#include "ctc/hypothesis.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace oasr::ctc {

float max_value(const float* x, int64_t n) {
  // Eight independent lanes: a single running max is one long dependency chain, while this
  // form vectorises.
  constexpr int kLanes = 8;
  float lane[kLanes];
  for (float& l : lane) l = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  }
  float m = lane[0];
  for (int j = 1; j < kLanes; ++j) m = lane[j] > m ? lane[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

int32_t argmax(const float* x, int64_t n) {
  const float m = max_value(x, n);
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] == m) return static_cast<int32_t>(i);
  }
  return 0;
}

void fill_posteriors(const RowView& row, Hypothesis& h) {
  h.probs.resize(h.tokens.size());
  for (std::size_t i = 0; i < h.tokens.size(); ++i) {
    const int64_t t = h.frames[i];
    const int32_t tok = h.tokens[i];
    float lp = row.frame(t)[tok];
    if (t + 1 < row.length) lp = std::max(lp, row.frame(t + 1)[tok]);
    h.probs[i] = std::exp(static_cast<double>(lp));
  }
}

}  // namespace oasr::ctc
