// Token-passing Viterbi beam search over a decoding graph and CTC log-probs: Kaldi's
// FasterDecoder (kaldi/src/decoder/faster-decoder.cc, as kaldi-decoder ships it), restated.
// Framework-free C++17.
//
// Per decoded frame:
//   1. the cutoff over the frame's tokens: best + beam; tightened to the max_active-th best
//      cost (then the next frame's beam is that distance + beam_delta) or loosened to the
//      min_active-th best, order statistics taken in float as Kaldi takes them;
//   2. every token under the cutoff follows its emitting arcs (input label k consumes the
//      frame at cost -log_probs[k - 1]); the running cutoff for the new tokens starts from the
//      best token's arcs and tightens as tokens are added; one token per search state, the
//      cheaper kept (a tie keeps the first);
//   3. epsilon arcs from every token under that cutoff, to a fixpoint (a LIFO queue).
// The token list is walked in Kaldi's hash-list order (token_list.h), so the running cutoffs,
// and with them the result, are Kaldi's in every configuration.
//
// A search state is a graph state, or (graph state, boosting node) with a BoostView: an arc
// with an output label then also moves the node and adds the node's step cost (in float, to
// the arc weight, as a composed graph's arc weight is summed), and a final state also pays the
// node's final cost.
//
// The best path is Kaldi's GetBestPath: if any token is in a final state the cheapest by
// cost + final cost, else the cheapest by cost. Tracebacks are records (previous record, arc,
// frame) in an arena that is compacted to the records live tokens reach as it grows.
//
// Blank skipping is the ctc family's (oasr/csrc/host/ctc/prefix_beam.h): a frame whose blank
// probability exceeds blank_skip_threshold is not decoded; when the next decoded frame's argmax
// is a non-blank equal to the previous decoded frame's and the frame before it was skipped, the
// last skipped frame is decoded first.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "wfst/graph.h"
#include "wfst/token_list.h"

namespace oasr::wfst {

struct DecoderOptions {
  float beam = 16.0f;
  int32_t max_active = std::numeric_limits<int32_t>::max();
  int32_t min_active = 20;
  float beam_delta = 0.5f;
  float hash_ratio = 2.0f;
  float acoustic_scale = 1.0f;  // log-probs are multiplied by it (in float)
  float blank_penalty = 0.0f;   // subtracted from the blank's log-prob before the scale
  int32_t blank = 0;            // the blank's column in the log-probs
  double blank_skip_threshold = 1.0;  // >= 1: never skip
};

struct BestPath {
  bool ok = false;             // some token survived
  bool reached_final = false;  // a token was in a final state
  double cost = 0.0;           // the path's cost (with the final cost when it reached one)
  // Per decoded frame: the emitting arc's input label minus one (the model's token id), the
  // frame's index in the fed log-probs, and whether the arc entered its state from another one
  // (a self-loop continues a token).
  std::vector<int32_t> labels, frames;
  std::vector<uint8_t> entered;
  // Output labels on the path, each with the index (into `labels`) of the last decoded frame
  // at or before its arc (-1: before the first frame).
  std::vector<int32_t> words, word_steps;
};

class FasterDecoder {
 public:
  FasterDecoder(const GraphView& graph, const DecoderOptions& options,
                const BoostView* boost = nullptr);

  void init();
  // Decodes `frames` rows of `vocab` log-probs, continuing from the last call.
  void advance(const float* log_probs, int64_t frames, int64_t vocab);
  BestPath best_path(bool use_final_probs = true) const;

  int32_t frames_decoded() const { return static_cast<int32_t>(frame_map_.size()); }
  int64_t frames_seen() const { return frames_seen_; }
  int64_t active_tokens() const;

 private:
  struct Rec {
    int32_t prev;   // -1: none (the start)
    int32_t arc;    // >= 0 emitting arc; <= -2 epsilon arc -(arc + 2); -1 the start
    int32_t frame;  // decoded frame of the last emitting arc on the path (-1: none yet)
  };

  void decode_frame(const float* row, int64_t vocab, int64_t source_frame);
  double get_cutoff(int32_t head, std::size_t* count, float* adaptive_beam, int32_t* best);
  double process_emitting(const float* row);
  void process_nonemitting(double cutoff);
  // The arc weight an arc carries from search state `key` (boosting included) and the next key.
  inline void follow(uint64_t key, int32_t olabel, float weight, int32_t next, float* w,
                     uint64_t* to) const;
  float final_cost(uint64_t key) const;
  int32_t push_rec(int32_t prev, int32_t arc, int32_t frame);
  void collect();

  GraphView g_;
  DecoderOptions opt_;
  const BoostView* boost_;
  TokenList toks_;
  std::vector<Rec> recs_;
  std::size_t collect_at_ = 1 << 16;
  std::vector<int32_t> queue_;
  std::vector<float> costs_;  // get_cutoff's order statistics
  std::vector<float> scaled_;  // a frame's log-probs after the penalty and the scale
  std::vector<int32_t> frame_map_;  // decoded frame -> fed frame
  int64_t frames_seen_ = 0;
  // Blank skipping across calls.
  bool prev_skipped_ = false;
  int32_t last_best_ = -1;
  int64_t skipped_frame_ = -1;
  std::vector<float> skipped_row_;
};

// One row per utterance: (B, T, V) log-probs, each row its first lengths[b] frames; rows spread
// over up to num_threads threads. boost[b] may be null.
std::vector<BestPath> decode_batch(const GraphView& graph, const DecoderOptions& options,
                                   const std::vector<const BoostView*>& boost,
                                   const float* log_probs, const int64_t* lengths, int64_t batch,
                                   int64_t frames, int64_t vocab, int num_threads);

}  // namespace oasr::wfst
