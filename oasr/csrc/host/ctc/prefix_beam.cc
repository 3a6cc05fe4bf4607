#include "ctc/prefix_beam.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace oasr::ctc {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)).
inline double log_add(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  return a > b ? a + std::log1p(std::exp(b - a)) : b + std::log1p(std::exp(a - b));
}

// A surviving prefix is a node of a per-row token trie, so merging two ways of reaching the
// same token sequence is an integer comparison. A token sequence has one node for the whole
// search: a prefix that leaves the beam and comes back gets its old node back (found through
// its parent's child list), so its live extensions are still found from it. stamp/slot
// locate the node's entry in the frame being built.
struct TrieNode {
  int32_t parent;
  int32_t token;  // -1 at the root
  int64_t stamp;
  int32_t slot;
  int32_t first_child = -1, next_sibling = -1;
};

// Emitting frames live in a persistent list (one arena per row): a best path shares its
// earlier frames with the path it extended, so extending costs one node, not a copy.
struct FrameNode {
  int32_t prev;
  int32_t frame;
};

struct Prefix {
  int32_t node;    // trie node; -1 for a prefix first reached this frame, until it survives
  int32_t parent;  // the trie node it extends (meaningful while node == -1)
  int32_t token;   // its last token; -1 for the empty prefix
  double pb = kNegInf, pnb = kNegInf;     // log-add-exp over paths ending in blank / token
  double vb = kNegInf, vnb = kNegInf;     // the same two path sets, max instead of sum
  int32_t frames_b = -1, frames_nb = -1;  // emitting frames of the two best paths
  // A token-ending best path found this frame is kept as (its predecessor's frames, t) and
  // written to the arena only if the prefix survives the frame.
  int32_t pending_prev = -1, pending_t = -1;
  double total = kNegInf;                 // log_add(pb, pnb), set when the frame is pruned

  void extend_nb(double score, int32_t prev, int64_t t) {
    vnb = score;
    pending_prev = prev;
    pending_t = static_cast<int32_t>(t);
  }
  void continue_nb(double score, int32_t frames) {
    vnb = score;
    frames_nb = frames;
    pending_t = -1;
  }

  double viterbi() const { return vb > vnb ? vb : vnb; }
  int32_t frames() const { return vb > vnb ? frames_b : frames_nb; }
};

// The live prefixes' trie nodes keyed by (parent node, last token): whether extending a live
// prefix by a token lands on another live prefix. Open addressing, emptied by a stamp.
class LiveChildren {
 public:
  explicit LiveChildren(int32_t beam) {
    std::size_t cap = 16;
    while (cap < 4 * static_cast<std::size_t>(beam)) cap <<= 1;
    slots_.assign(cap, Slot{0, -1, -1});
    mask_ = cap - 1;
  }

  void clear() { ++stamp_; }

  void insert(int32_t parent, int32_t token, int32_t node) {
    const uint64_t key = pack(parent, token);
    std::size_t i = hash(key);
    while (slots_[i].stamp == stamp_) i = (i + 1) & mask_;
    slots_[i] = Slot{key, node, stamp_};
  }

  int32_t find(int32_t parent, int32_t token) const {
    const uint64_t key = pack(parent, token);
    for (std::size_t i = hash(key); slots_[i].stamp == stamp_; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].node;
    }
    return -1;
  }

 private:
  struct Slot {
    uint64_t key;
    int32_t node;
    int64_t stamp;
  };

  static uint64_t pack(int32_t parent, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) |
           static_cast<uint32_t>(token);
  }
  std::size_t hash(uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask_;
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  int64_t stamp_ = 0;
};

class RowSearch {
 public:
  RowSearch(const RowView& row, const PrefixBeamOptions& options)
      : row_(row),
        opt_(options),
        k_(static_cast<int32_t>(std::min<int64_t>(options.beam_size, row.vocab))),
        live_(options.beam_size) {
    trie_.push_back({-1, -1, -1, 0, -1, -1});
    Prefix root{0, -1, -1};
    root.pb = 0.0;
    root.vb = 0.0;
    root.vnb = 0.0;
    root.total = 0.0;
    cur_.push_back(root);
    top_.reserve(static_cast<std::size_t>(k_) + 1);
    next_.reserve(static_cast<std::size_t>(2 * k_ * options.beam_size + 1));
  }

  std::vector<Hypothesis> run() {
    const bool skipping = opt_.blank_skip_threshold < 1.0;
    bool prev_skipped = false;
    int64_t last_skipped = -1;
    int32_t last_best = -1;
    for (int64_t t = 0; t < row_.length; ++t) {
      if (skipping && std::exp(static_cast<double>(row_.frame(t)[opt_.blank])) >
                          opt_.blank_skip_threshold) {
        prev_skipped = true;
        last_skipped = t;
        continue;
      }
      if (prev_skipped) {
        const int32_t best = argmax(row_.frame(t), row_.vocab);
        if (best != opt_.blank && best == last_best) step(last_skipped);
      }
      step(t);
      last_best = top_[0];
      prev_skipped = false;
    }
    return results();
  }

 private:
  // top_ = the frame's k best ids, descending; on a tie the lower id first. The k-th largest
  // of the per-block maxima bounds the k-th largest value from below (k blocks each hold one
  // at least that large), so only blocks reaching it are read element by element: on a
  // vocabulary of thousands that is about k blocks, and the rest of the frame costs one
  // vectorised max pass.
  void select(const float* lp) {
    constexpr int64_t kBlock = 32;
    const int64_t blocks = (row_.vocab + kBlock - 1) / kBlock;
    block_max_.resize(static_cast<std::size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t v0 = b * kBlock;
      block_max_[static_cast<std::size_t>(b)] = max_value(lp + v0, std::min(kBlock,
                                                                             row_.vocab - v0));
    }
    float floor = -std::numeric_limits<float>::infinity();
    if (blocks > k_) {
      sorted_max_ = block_max_;
      std::nth_element(sorted_max_.begin(), sorted_max_.begin() + (k_ - 1), sorted_max_.end(),
                       std::greater<float>());
      floor = sorted_max_[static_cast<std::size_t>(k_ - 1)];
    }
    top_.clear();
    float kth = -std::numeric_limits<float>::infinity();
    for (int64_t b = 0; b < blocks; ++b) {
      if (block_max_[static_cast<std::size_t>(b)] < floor) continue;
      const int64_t v1 = std::min(row_.vocab, (b + 1) * kBlock);
      for (int64_t v = b * kBlock; v < v1; ++v) {
        const float x = lp[v];
        auto n = static_cast<int32_t>(top_.size());
        if (n == k_) {
          if (!(x > kth)) continue;
        } else if (std::isnan(x)) {
          continue;
        }
        int32_t i = n;
        while (i > 0 && x > lp[top_[static_cast<std::size_t>(i - 1)]]) --i;
        top_.insert(top_.begin() + i, static_cast<int32_t>(v));
        if (static_cast<int32_t>(top_.size()) > k_) top_.pop_back();
        n = static_cast<int32_t>(top_.size());
        if (n == k_) kth = lp[top_[static_cast<std::size_t>(n - 1)]];
      }
    }
  }

  // The entry of live prefix `node` in next_, created (empty) on first touch this frame.
  Prefix& existing(int32_t node) {
    TrieNode& n = trie_[static_cast<std::size_t>(node)];
    if (n.stamp != stamp_) {
      n.stamp = stamp_;
      n.slot = static_cast<int32_t>(next_.size());
      next_.push_back(Prefix{node, n.parent, n.token});
    }
    return next_[static_cast<std::size_t>(n.slot)];
  }

  // The entry of h + u: a live prefix's when h + u is one, else a new entry (live prefixes are
  // distinct sequences and each (h, u) pair is visited once per frame, so a new prefix is
  // never reached twice).
  Prefix& extension(const Prefix& h, int32_t u) {
    const int32_t node = live_.find(h.node, u);
    if (node >= 0) return existing(node);
    next_.push_back(Prefix{-1, h.node, u});
    return next_.back();
  }

  // The trie node of parent + token: the one it had when last in the beam, else a new one.
  // Consulted only when a prefix new to the beam survives a frame, and a parent has few
  // children that ever survived.
  int32_t node_of(int32_t parent, int32_t token) {
    int32_t& head = trie_[static_cast<std::size_t>(parent)].first_child;
    for (int32_t c = head; c >= 0; c = trie_[static_cast<std::size_t>(c)].next_sibling) {
      if (trie_[static_cast<std::size_t>(c)].token == token) return c;
    }
    const auto node = static_cast<int32_t>(trie_.size());
    const int32_t sibling = head;  // read before push_back can move the trie
    trie_.push_back({parent, token, -1, 0, -1, sibling});
    trie_[static_cast<std::size_t>(parent)].first_child = node;
    return node;
  }

  int32_t append_frame(int32_t prev, int64_t t) {
    frames_.push_back({prev, static_cast<int32_t>(t)});
    return static_cast<int32_t>(frames_.size() - 1);
  }

  void step(int64_t t) {
    const float* lp = row_.frame(t);
    select(lp);
    ++stamp_;
    next_.clear();
    for (const int32_t u : top_) {
      const double p = lp[u];
      for (const Prefix& h : cur_) {
        if (u == opt_.blank) {
          Prefix& n = existing(h.node);
          n.pb = log_add(n.pb, h.total + p);
          n.vb = h.viterbi() + p;  // the one way to reach it: h itself
          n.frames_b = h.frames();
        } else if (u == h.token) {
          Prefix& same = existing(h.node);
          same.pnb = log_add(same.pnb, h.pnb + p);
          // The run goes on: its first frame stands.
          if (same.vnb < h.vnb + p) same.continue_nb(h.vnb + p, h.frames_nb);
          Prefix& ext = extension(h, u);
          ext.pnb = log_add(ext.pnb, h.pb + p);
          if (ext.vnb < h.vb + p) ext.extend_nb(h.vb + p, h.frames_b, t);
        } else {
          Prefix& ext = extension(h, u);
          ext.pnb = log_add(ext.pnb, h.total + p);
          if (ext.vnb < h.viterbi() + p) ext.extend_nb(h.viterbi() + p, h.frames(), t);
        }
      }
    }
    prune();
  }

  void prune() {
    for (Prefix& n : next_) {
      const double s = log_add(n.pb, n.pnb);
      n.total = std::isnan(s) ? kNegInf : s;  // a NaN frame must not break the sort's order
    }
    order_.resize(next_.size());
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    // Descending score, then first touched first: a stable sort's order, kept for the beam only.
    const auto keep = std::min(order_.size(), static_cast<std::size_t>(opt_.beam_size));
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep),
                      order_.end(), [&](std::size_t a, std::size_t b) {
                        const double sa = next_[a].total, sb = next_[b].total;
                        return sa > sb || (sa == sb && a < b);
                      });
    order_.resize(keep);
    cur_.clear();
    live_.clear();
    for (const std::size_t i : order_) {
      Prefix h = next_[i];
      if (static_cast<int32_t>(cur_.size()) == opt_.beam_size || h.total == kNegInf) break;
      if (h.node < 0) h.node = node_of(h.parent, h.token);
      if (h.pending_t >= 0) {
        h.frames_nb = append_frame(h.pending_prev, h.pending_t);
        h.pending_t = -1;
      }
      if (h.token >= 0) live_.insert(h.parent, h.token, h.node);
      cur_.push_back(h);
    }
  }

  std::vector<Hypothesis> results() const {
    std::vector<Hypothesis> out;
    const std::size_t n = std::min(cur_.size(), static_cast<std::size_t>(opt_.nbest));
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Prefix& h = cur_[i];
      Hypothesis hyp;
      hyp.score = h.total;
      for (int32_t node = h.node; node > 0;
           node = trie_[static_cast<std::size_t>(node)].parent) {
        hyp.tokens.push_back(trie_[static_cast<std::size_t>(node)].token);
      }
      for (int32_t f = h.frames(); f >= 0; f = frames_[static_cast<std::size_t>(f)].prev) {
        hyp.frames.push_back(frames_[static_cast<std::size_t>(f)].frame);
      }
      if (hyp.frames.size() != hyp.tokens.size()) {
        throw std::logic_error("ctc prefix beam: a hypothesis lost track of its frames");
      }
      std::reverse(hyp.tokens.begin(), hyp.tokens.end());
      std::reverse(hyp.frames.begin(), hyp.frames.end());
      fill_posteriors(row_, hyp);
      out.push_back(std::move(hyp));
    }
    return out;
  }

  RowView row_;
  PrefixBeamOptions opt_;
  int32_t k_;
  int64_t stamp_ = -1;
  std::vector<TrieNode> trie_;
  LiveChildren live_;
  std::vector<FrameNode> frames_;
  std::vector<Prefix> cur_, next_;
  std::vector<int32_t> top_;
  std::vector<float> block_max_, sorted_max_;
  std::vector<std::size_t> order_;
};

}  // namespace

std::vector<Hypothesis> prefix_beam_row(const RowView& row, const PrefixBeamOptions& options) {
  if (options.beam_size < 1) throw std::invalid_argument("ctc prefix beam: beam_size < 1");
  if (options.nbest < 1) throw std::invalid_argument("ctc prefix beam: nbest < 1");
  if (options.blank < 0 || options.blank >= row.vocab) {
    throw std::invalid_argument("ctc prefix beam: blank id outside the vocabulary");
  }
  return RowSearch(row, options).run();
}

std::vector<std::vector<Hypothesis>> prefix_beam(const float* log_probs, const int64_t* lengths,
                                                 int64_t batch, int64_t frames, int64_t vocab,
                                                 const PrefixBeamOptions& options,
                                                 int num_threads) {
  std::vector<std::vector<Hypothesis>> out(static_cast<std::size_t>(batch));
  for_each_row(batch, num_threads, [&](int64_t b) {
    const RowView row{log_probs + b * frames * vocab, lengths[b], vocab};
    out[static_cast<std::size_t>(b)] = prefix_beam_row(row, options);
  });
  return out;
}

}  // namespace oasr::ctc
