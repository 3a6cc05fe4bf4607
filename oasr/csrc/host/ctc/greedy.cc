#include "ctc/greedy.h"

namespace oasr::ctc {

Hypothesis greedy_row(const RowView& row, int32_t blank) {
  Hypothesis h;
  int32_t prev = blank;
  double score = 0.0;
  for (int64_t t = 0; t < row.length; ++t) {
    const float* lp = row.frame(t);
    const int32_t best = argmax(lp, row.vocab);
    score += lp[best];
    if (best != blank && best != prev) {
      h.tokens.push_back(best);
      h.frames.push_back(static_cast<int32_t>(t));
    }
    prev = best;
  }
  h.score = score;
  fill_posteriors(row, h);
  return h;
}

std::vector<Hypothesis> greedy(const float* log_probs, const int64_t* lengths, int64_t batch,
                               int64_t frames, int64_t vocab, int32_t blank, int num_threads) {
  std::vector<Hypothesis> out(static_cast<std::size_t>(batch));
  for_each_row(batch, num_threads, [&](int64_t b) {
    const RowView row{log_probs + b * frames * vocab, lengths[b], vocab};
    out[static_cast<std::size_t>(b)] = greedy_row(row, blank);
  });
  return out;
}

}  // namespace oasr::ctc
