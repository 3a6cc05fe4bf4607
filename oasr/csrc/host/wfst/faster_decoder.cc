#include "wfst/faster_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "ctc/hypothesis.h"

namespace oasr::wfst {

namespace {

constexpr uint64_t kStateMask = 0xffffffffULL;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline int32_t state_of(uint64_t key) { return static_cast<int32_t>(key & kStateMask); }

}  // namespace

FasterDecoder::FasterDecoder(const GraphView& graph, const DecoderOptions& options,
                             const BoostView* boost)
    : g_(graph), opt_(options), boost_(boost) {
  toks_.set_size(1000);  // Kaldi's first size; it grows with the active tokens
}

int32_t FasterDecoder::push_rec(int32_t prev, int32_t arc, int32_t frame) {
  recs_.push_back(Rec{prev, arc, frame});
  return static_cast<int32_t>(recs_.size() - 1);
}

void FasterDecoder::init() {
  for (int32_t e = toks_.clear(), next; e != TokenList::kNone; e = next) {
    next = toks_.at(e).tail;
    toks_.release(e);
  }
  recs_.clear();
  collect_at_ = 1 << 16;
  frame_map_.clear();
  frames_seen_ = 0;
  prev_skipped_ = false;
  last_best_ = -1;
  skipped_frame_ = -1;
  bool inserted = false;
  toks_.insert(static_cast<uint64_t>(g_.start), 0.0, push_rec(-1, -1, -1), &inserted);
  process_nonemitting(std::numeric_limits<float>::max());
}

inline void FasterDecoder::follow(uint64_t key, int32_t olabel, float weight, int32_t next,
                                  float* w, uint64_t* to) const {
  if (olabel != 0 && boost_ != nullptr) {
    int32_t node = 0;
    float step = 0.0f;
    boost_->step(static_cast<int32_t>(key >> 32), olabel, &node, &step);
    *w = weight + step;
    *to = static_cast<uint64_t>(static_cast<uint32_t>(next)) |
          (static_cast<uint64_t>(node) << 32);
  } else {
    *w = weight;
    *to = static_cast<uint64_t>(static_cast<uint32_t>(next)) | (key & ~kStateMask);
  }
}

float FasterDecoder::final_cost(uint64_t key) const {
  const float f = g_.final_cost[state_of(key)];
  if (boost_ == nullptr || f == std::numeric_limits<float>::infinity()) return f;
  return f + boost_->final_cost[key >> 32];
}

double FasterDecoder::get_cutoff(int32_t head, std::size_t* count, float* adaptive_beam,
                                 int32_t* best) {
  double best_cost = kInf;
  std::size_t n = 0;
  *best = TokenList::kNone;
  if (opt_.max_active == std::numeric_limits<int32_t>::max() && opt_.min_active == 0) {
    for (int32_t e = head; e != TokenList::kNone; e = toks_.at(e).tail, ++n) {
      const double w = toks_.at(e).cost;
      if (w < best_cost) {
        best_cost = w;
        *best = e;
      }
    }
    *count = n;
    *adaptive_beam = opt_.beam;
    return best_cost + opt_.beam;
  }
  costs_.clear();
  for (int32_t e = head; e != TokenList::kNone; e = toks_.at(e).tail, ++n) {
    const double w = toks_.at(e).cost;
    costs_.push_back(static_cast<float>(w));
    if (w < best_cost) {
      best_cost = w;
      *best = e;
    }
  }
  *count = n;
  const double beam_cutoff = best_cost + opt_.beam;
  double min_active_cutoff = kInf, max_active_cutoff = kInf;
  const std::size_t max_active = static_cast<std::size_t>(opt_.max_active);
  const std::size_t min_active = static_cast<std::size_t>(opt_.min_active);
  if (costs_.size() > max_active) {
    std::nth_element(costs_.begin(), costs_.begin() + static_cast<std::ptrdiff_t>(max_active),
                     costs_.end());
    max_active_cutoff = costs_[max_active];
  }
  if (max_active_cutoff < beam_cutoff) {  // max_active is tighter than the beam
    *adaptive_beam = static_cast<float>(max_active_cutoff - best_cost + opt_.beam_delta);
    return max_active_cutoff;
  }
  if (costs_.size() > min_active) {
    if (min_active == 0) {
      min_active_cutoff = best_cost;
    } else {
      const auto end = costs_.size() > max_active
                           ? costs_.begin() + static_cast<std::ptrdiff_t>(max_active)
                           : costs_.end();
      std::nth_element(costs_.begin(), costs_.begin() + static_cast<std::ptrdiff_t>(min_active),
                       end);
      min_active_cutoff = costs_[min_active];
    }
  }
  if (min_active_cutoff > beam_cutoff) {  // min_active is looser than the beam
    *adaptive_beam = static_cast<float>(min_active_cutoff - best_cost + opt_.beam_delta);
    return min_active_cutoff;
  }
  *adaptive_beam = opt_.beam;
  return beam_cutoff;
}

double FasterDecoder::process_emitting(const float* row) {
  const int32_t frame = static_cast<int32_t>(frame_map_.size()) - 1;
  const int32_t last = toks_.clear();
  std::size_t count = 0;
  float adaptive_beam = 0.0f;
  int32_t best = TokenList::kNone;
  const double cutoff = get_cutoff(last, &count, &adaptive_beam, &best);
  const auto size = static_cast<std::size_t>(static_cast<float>(count) * opt_.hash_ratio);
  if (size > toks_.size()) toks_.set_size(size);

  double next_cutoff = kInf;
  float w = 0.0f;
  uint64_t to = 0;
  if (best != TokenList::kNone) {  // a first bound from the best token's arcs
    const TokenElem tok = toks_.at(best);
    const int32_t s = state_of(tok.key);
    for (int64_t a = g_.emit_offsets[s]; a < g_.emit_offsets[s + 1]; ++a) {
      const float ac_cost = -row[g_.emit_ilabel[a] - 1];
      follow(tok.key, g_.emit_olabel[a], g_.emit_weight[a], g_.emit_next[a], &w, &to);
      const double weight = w + tok.cost + ac_cost;
      if (weight + adaptive_beam < next_cutoff) next_cutoff = weight + adaptive_beam;
    }
  }
  for (int32_t e = last, tail; e != TokenList::kNone; e = tail) {
    const TokenElem tok = toks_.at(e);
    if (tok.cost < cutoff) {
      const int32_t s = state_of(tok.key);
      for (int64_t a = g_.emit_offsets[s]; a < g_.emit_offsets[s + 1]; ++a) {
        const float ac_cost = -row[g_.emit_ilabel[a] - 1];
        follow(tok.key, g_.emit_olabel[a], g_.emit_weight[a], g_.emit_next[a], &w, &to);
        const double weight = w + tok.cost + ac_cost;
        if (weight < next_cutoff) {
          const double cost = tok.cost + w + ac_cost;
          const int32_t rec = push_rec(tok.rec, static_cast<int32_t>(a), frame);
          bool inserted = false;
          const int32_t found = toks_.insert(to, cost, rec, &inserted);
          if (weight + adaptive_beam < next_cutoff) next_cutoff = weight + adaptive_beam;
          if (!inserted) {
            TokenElem& old = toks_.at(found);
            if (old.cost > cost) {
              old.cost = cost;
              old.rec = rec;
            } else {
              recs_.pop_back();  // nothing refers to it
            }
          }
        }
      }
    }
    tail = tok.tail;
    toks_.release(e);
  }
  return next_cutoff;
}

void FasterDecoder::process_nonemitting(double cutoff) {
  const int32_t frame = static_cast<int32_t>(frame_map_.size()) - 1;
  queue_.clear();
  for (int32_t e = toks_.head(); e != TokenList::kNone; e = toks_.at(e).tail) queue_.push_back(e);
  float w = 0.0f;
  uint64_t to = 0;
  while (!queue_.empty()) {
    const int32_t e = queue_.back();
    queue_.pop_back();
    const TokenElem tok = toks_.at(e);
    if (tok.cost > cutoff) continue;
    const int32_t s = state_of(tok.key);
    for (int64_t a = g_.eps_offsets[s]; a < g_.eps_offsets[s + 1]; ++a) {
      follow(tok.key, g_.eps_olabel[a], g_.eps_weight[a], g_.eps_next[a], &w, &to);
      const double cost = tok.cost + w;
      if (cost > cutoff) continue;
      const int32_t rec = push_rec(tok.rec, static_cast<int32_t>(-(a + 2)), frame);
      bool inserted = false;
      const int32_t found = toks_.insert(to, cost, rec, &inserted);
      if (inserted) {
        queue_.push_back(found);
        continue;
      }
      TokenElem& old = toks_.at(found);
      if (old.cost > cost) {
        old.cost = cost;
        old.rec = rec;
        queue_.push_back(found);
      } else {
        recs_.pop_back();
      }
    }
  }
}

void FasterDecoder::collect() {
  // Mark what the live tokens reach, then compact in place, keeping the order (a record's new
  // index is never above its old one).
  constexpr int32_t kDead = -1, kLive = -2;
  std::vector<int32_t> remap(recs_.size(), kDead);
  for (int32_t e = toks_.head(); e != TokenList::kNone; e = toks_.at(e).tail) {
    for (int32_t r = toks_.at(e).rec; r >= 0 && remap[static_cast<std::size_t>(r)] == kDead;
         r = recs_[static_cast<std::size_t>(r)].prev) {
      remap[static_cast<std::size_t>(r)] = kLive;
    }
  }
  int32_t n = 0;
  for (auto& m : remap) {
    if (m == kLive) m = n++;
  }
  for (std::size_t i = 0; i < recs_.size(); ++i) {
    if (remap[i] < 0) continue;
    Rec r = recs_[i];
    r.prev = r.prev >= 0 ? remap[static_cast<std::size_t>(r.prev)] : -1;
    recs_[static_cast<std::size_t>(remap[i])] = r;
  }
  recs_.resize(static_cast<std::size_t>(n));
  for (int32_t e = toks_.head(); e != TokenList::kNone; e = toks_.at(e).tail) {
    TokenElem& t = toks_.at(e);
    t.rec = remap[static_cast<std::size_t>(t.rec)];
  }
  collect_at_ = std::max<std::size_t>(static_cast<std::size_t>(n) * 2, 1 << 16);
}

void FasterDecoder::decode_frame(const float* row, int64_t vocab, int64_t source_frame) {
  const float* r = row;
  if (opt_.acoustic_scale != 1.0f || opt_.blank_penalty != 0.0f) {
    scaled_.assign(row, row + vocab);
    scaled_[static_cast<std::size_t>(opt_.blank)] -= opt_.blank_penalty;
    for (auto& x : scaled_) x *= opt_.acoustic_scale;
    r = scaled_.data();
  }
  frame_map_.push_back(static_cast<int32_t>(source_frame));
  process_nonemitting(process_emitting(r));
  if (recs_.size() >= collect_at_) collect();
}

void FasterDecoder::advance(const float* log_probs, int64_t frames, int64_t vocab) {
  const bool skipping = opt_.blank_skip_threshold < 1.0;
  for (int64_t t = 0; t < frames; ++t) {
    const float* row = log_probs + t * vocab;
    const int64_t source = frames_seen_ + t;
    if (!skipping) {
      decode_frame(row, vocab, source);
      continue;
    }
    if (std::exp(static_cast<double>(row[opt_.blank])) > opt_.blank_skip_threshold) {
      prev_skipped_ = true;
      skipped_row_.assign(row, row + vocab);  // the next chunk may need it
      skipped_frame_ = source;
      continue;
    }
    const int32_t best = oasr::ctc::argmax(row, vocab);
    if (prev_skipped_ && best != opt_.blank && best == last_best_) {
      decode_frame(skipped_row_.data(), vocab, skipped_frame_);
    }
    decode_frame(row, vocab, source);
    last_best_ = best;
    prev_skipped_ = false;
  }
  frames_seen_ += frames;
}

int64_t FasterDecoder::active_tokens() const {
  int64_t n = 0;
  for (int32_t e = toks_.head(); e != TokenList::kNone; e = toks_.at(e).tail) ++n;
  return n;
}

BestPath FasterDecoder::best_path(bool use_final_probs) const {
  BestPath out;
  bool is_final = false;
  for (int32_t e = toks_.head(); e != TokenList::kNone; e = toks_.at(e).tail) {
    const TokenElem& t = toks_.at(e);
    if (t.cost != kInf && final_cost(t.key) != std::numeric_limits<float>::infinity()) {
      is_final = true;
      break;
    }
  }
  int32_t best = TokenList::kNone;
  double best_cost = kInf;
  for (int32_t e = toks_.head(); e != TokenList::kNone; e = toks_.at(e).tail) {
    const TokenElem& t = toks_.at(e);
    if (!is_final) {
      if (best == TokenList::kNone || toks_.at(best).cost > t.cost) best = e;
    } else {
      const double c = t.cost + final_cost(t.key);
      if (c < best_cost && c != kInf) {
        best_cost = c;
        best = e;
      }
    }
  }
  if (best == TokenList::kNone) return out;
  const TokenElem& tok = toks_.at(best);
  out.ok = true;
  out.reached_final = is_final;
  out.cost = tok.cost + (is_final && use_final_probs ? final_cost(tok.key) : 0.0f);
  std::vector<int32_t> path;
  for (int32_t r = tok.rec; r >= 0; r = recs_[static_cast<std::size_t>(r)].prev) {
    path.push_back(r);
  }
  std::reverse(path.begin(), path.end());
  int32_t state = g_.start;
  for (const int32_t r : path) {
    const Rec& rec = recs_[static_cast<std::size_t>(r)];
    if (rec.arc == -1) continue;  // the start
    int32_t next = 0, olabel = 0;
    if (rec.arc >= 0) {
      next = g_.emit_next[rec.arc];
      olabel = g_.emit_olabel[rec.arc];
      out.labels.push_back(g_.emit_ilabel[rec.arc] - 1);
      out.frames.push_back(frame_map_[static_cast<std::size_t>(rec.frame)]);
      out.entered.push_back(next != state ? 1 : 0);
    } else {
      const int64_t a = -static_cast<int64_t>(rec.arc) - 2;
      next = g_.eps_next[a];
      olabel = g_.eps_olabel[a];
    }
    if (olabel != 0) {
      out.words.push_back(olabel);
      out.word_steps.push_back(static_cast<int32_t>(out.labels.size()) - 1);
    }
    state = next;
  }
  return out;
}

std::vector<BestPath> decode_batch(const GraphView& graph, const DecoderOptions& options,
                                   const std::vector<const BoostView*>& boost,
                                   const float* log_probs, const int64_t* lengths, int64_t batch,
                                   int64_t frames, int64_t vocab, int num_threads) {
  std::vector<BestPath> out(static_cast<std::size_t>(batch));
  oasr::ctc::for_each_row(batch, num_threads, [&](int64_t b) {
    FasterDecoder dec(graph, options, boost.empty() ? nullptr : boost[static_cast<std::size_t>(b)]);
    dec.init();
    dec.advance(log_probs + b * frames * vocab, lengths[b], vocab);
    out[static_cast<std::size_t>(b)] = dec.best_path(true);
  });
  return out;
}

}  // namespace oasr::wfst
