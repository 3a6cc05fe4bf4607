// Batched token passing over a WFST, one utterance per executor: a CUDA block per row
// (wfst_cuda.cu) or a serial host loop (oasr/csrc/host/python/wfst.cc, the CPU statement of the same code
// that the GPU is tested against). Framework-free: plain pointers, no torch, no CUDA outside the
// __CUDACC__ sections.
//
// The search is Kaldi's FasterDecoder (oasr/csrc/host/wfst/faster_decoder.h) with its one order-dependent
// step made exact: where Kaldi tightens the next frame's cutoff while it walks the tokens (so a
// token added early may survive a cutoff that later drops below it), this computes the cutoff
// over every arc first (min new cost + the adaptive beam) and then adds exactly the tokens
// under it. Everything else is Kaldi's, in the same arithmetic: costs in double, the frame's
// cutoff from the beam, or the max_active-th / min_active-th cost taken in float (an exact radix
// select, the value std::nth_element finds), the adaptive beam, epsilon arcs to a fixpoint
// under the emitting step's cutoff. Where Kaldi's early tokens never matter (max_active and
// min_active not binding) the two give the same tokens; in general the same best path up to
// those tokens.
//
// Per frame: (1) the cutoff over the frame's tokens; (2) the emitting arcs of the tokens under
// it, one thread per arc (a scan of their out-degrees, a binary search back to the token):
// the min new cost, then an atomicMin of each new cost into its destination's key, then the
// arcs reaching the minimum record (token, arc), the lowest winning; (3) epsilon rounds from
// the tokens that changed until none does. Each token's traceback entry (previous entry, arc)
// goes into a per-row arena; the best path is walked back from the best token at the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#ifdef __CUDACC__
#define OASR_HD __host__ __device__
#define OASR_ROW __device__  // the row search runs on the device only in the kernel library
#else
#define OASR_HD
#define OASR_ROW
#endif

namespace oasr::wfst {

constexpr uint64_t kEmptyKey = ~0ULL;  // above every cost's key
constexpr uint64_t kNoBackpointer = ~0ULL;
constexpr int32_t kStartArc = -1;  // an arena entry's arc: >= 0 emitting, <= -2 epsilon
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

// Status bits a row reports.
constexpr int32_t kReachedFinal = 1, kTokensOverflow = 2, kArenaOverflow = 4,
                  kPathOverflow = 8, kNoToken = 16;

// A double's bits mapped so that unsigned order is numeric order (negatives included).
OASR_HD inline uint64_t cost_key(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return (b >> 63) ? ~b : (b | 0x8000000000000000ULL);
}
OASR_HD inline double key_cost(uint64_t k) {
  const uint64_t b = (k >> 63) ? (k & 0x7fffffffffffffffULL) : ~k;
  double x;
  memcpy(&x, &b, sizeof x);
  return x;
}
OASR_HD inline uint32_t float_key(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return (b >> 31) ? ~b : (b | 0x80000000u);
}
OASR_HD inline float key_float(uint32_t k) {
  const uint32_t b = (k >> 31) ? (k & 0x7fffffffu) : ~k;
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

struct Graph {
  int32_t num_states, start;
  const float* final_cost;  // (S,) +inf: not final
  const int64_t* emit_offsets;  // (S + 1,)
  const int32_t* emit_ilabel;
  const float* emit_weight;
  const int32_t* emit_next;
  const int64_t* eps_offsets;  // (S + 1,)
  const float* eps_weight;
  const int32_t* eps_next;
};

struct Search {
  float beam;
  int32_t max_active, min_active;
  float beam_delta, acoustic_scale, blank_penalty;
  int32_t blank;
};

// One row's buffers. `capacity` tokens per frame list, `arena` traceback entries, `path` arcs.
struct RowBuffers {
  uint64_t* key;      // (S,) a state's best cost key this frame, kEmptyKey between frames
  uint64_t* bp;       // (S,) (token << 32 | arc) of the winning arc, kNoBackpointer
  int32_t* slot;      // (S,) the state's token in the list being built, -1
  int32_t* stamp;     // (S,) the epsilon round that last lowered its key
  int32_t* state[2];  // (capacity,) the two token lists: state, cost, arena entry
  double* cost[2];
  int32_t* entry[2];
  int32_t* scan;      // (capacity + 1,)
  int32_t* front[2];  // (capacity,) epsilon frontier (token indices)
  int32_t* changed;   // (capacity,) states changed in an epsilon round
  float* fkeys;       // (capacity,) costs in float, for the selection
  int32_t* arena_prev;  // (arena,)
  int32_t* arena_arc;
  int32_t capacity, arena;
};

struct RowIO {
  const float* log_probs;  // (T, V) the row's log-probs
  const int32_t* frames;   // (n,) the frames to decode, in order
  int32_t num_frames, vocab;
  int32_t* path;  // (path_capacity,) the best path's arcs, last first
  int32_t path_capacity;
  int32_t* path_length;
  double* path_cost;
  int32_t* status;
};

// Scalars the executor's threads share (shared memory on the device).
struct Shared {
  int32_t count[4];  // list sizes and counters
  int32_t hist[256];
  uint32_t prefix, mask;
  int32_t rank;
  double value[2];
};

template <class Exec>
struct RowSearch {
  const Graph& g;
  const Search& opt;
  RowBuffers& buf;
  RowIO& io;
  const Exec& ex;
  Shared& sh;
  int32_t arena_used = 0;
  int32_t status = 0;
  int cur = 0;  // the list holding the frame's tokens

  // -- selection -------------------------------------------------------------------------------

  // The k-th smallest (0-based) of fkeys[0..n), exactly: four 8-bit radix passes.
  OASR_ROW float kth_smallest(int32_t n, int32_t k) {
    ex.one([&] {
      sh.prefix = 0;
      sh.mask = 0;
      sh.rank = k;
    });
    ex.sync();
    for (int shift = 24; shift >= 0; shift -= 8) {
      ex.each(256, [&](int64_t i) { sh.hist[i] = 0; });
      ex.sync();
      const uint32_t prefix = sh.prefix, mask = sh.mask;
      ex.each(n, [&](int64_t i) {
        const uint32_t u = float_key(buf.fkeys[i]);
        if ((u & mask) == prefix) ex.atomic_add(&sh.hist[(u >> shift) & 255u], 1);
      });
      ex.sync();
      ex.one([&] {
        int32_t below = 0, d = 0;
        for (; d < 255 && below + sh.hist[d] <= sh.rank; ++d) below += sh.hist[d];
        sh.rank -= below;
        sh.prefix |= static_cast<uint32_t>(d) << shift;
        sh.mask |= 255u << shift;
      });
      ex.sync();
    }
    return key_float(sh.prefix);
  }

  // Kaldi's GetCutoff over the current list: the cutoff and the adaptive beam.
  OASR_ROW double cutoff(int32_t n, float* adaptive) {
    const double* cost = buf.cost[cur];
    const double best = ex.reduce_min(n, [&](int64_t i) { return cost[i]; });
    const double beam_cutoff = best + opt.beam;
    if (opt.max_active == 0x7fffffff && opt.min_active == 0) {
      *adaptive = opt.beam;
      return beam_cutoff;
    }
    ex.each(n, [&](int64_t i) { buf.fkeys[i] = static_cast<float>(cost[i]); });
    ex.sync();
    double max_cut = kInf;
    if (n > opt.max_active) max_cut = kth_smallest(n, opt.max_active);
    if (max_cut < beam_cutoff) {
      *adaptive = static_cast<float>(max_cut - best + opt.beam_delta);
      return max_cut;
    }
    double min_cut = kInf;
    if (n > opt.min_active) min_cut = opt.min_active == 0 ? best : kth_smallest(n, opt.min_active);
    if (min_cut > beam_cutoff) {
      *adaptive = static_cast<float>(min_cut - best + opt.beam_delta);
      return min_cut;
    }
    *adaptive = opt.beam;
    return beam_cutoff;
  }

  // -- lists ----------------------------------------------------------------------------------

  // Adds `state` to list `l` (its key already lowered from kEmptyKey by this thread).
  OASR_ROW void append(int l, int32_t state) {
    const int32_t pos = ex.atomic_add(&sh.count[l], 1);
    if (pos < buf.capacity) {
      buf.state[l][pos] = state;
      buf.slot[state] = pos;
    } else {
      ex.atomic_or(&sh.count[3], kTokensOverflow);
    }
  }

  // The token of a scanned arc index: scan[k] <= j < scan[k + 1].
  OASR_ROW int32_t owner(int32_t n, int64_t j) const {
    int32_t lo = 0, hi = n;  // scan[lo] <= j < scan[hi]
    while (hi - lo > 1) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (buf.scan[mid] <= j) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  // The emitting arc a (of token k's state) as the new cost and the cost Kaldi prunes on.
  OASR_ROW void emit_cost(const float* row, double tok, int64_t a, double* weight) const {
    const int32_t u = g.emit_ilabel[a] - 1;
    float v = row[u];
    if (opt.acoustic_scale != 1.0f || opt.blank_penalty != 0.0f) {
      if (u == opt.blank) v -= opt.blank_penalty;
      v *= opt.acoustic_scale;
    }
    const float ac_cost = -v;
    *weight = g.emit_weight[a] + tok + ac_cost;
  }

  // Reads the packed backpointer of `state` into (token, arc code).
  OASR_ROW static void unpack(uint64_t bp, int32_t* tok, int32_t* arc) {
    *tok = static_cast<int32_t>(bp >> 32);
    *arc = static_cast<int32_t>(bp & 0xffffffffULL);
  }

  // -- epsilon closure --------------------------------------------------------------------------

  // Epsilon arcs from list `l`'s tokens to a fixpoint; tokens costing more than `cut` are not
  // expanded, new costs above it are dropped.
  OASR_ROW void closure(int l, double cut, int32_t frontier) {
    int f = 0;
    for (int32_t round = 1; frontier > 0 && !status; ++round) {
      const int32_t* front = buf.front[f];
      const double* cost = buf.cost[l];
      const int32_t total = ex.scan(frontier, buf.scan, [&](int64_t i) {
        const int32_t k = front[i];
        const int32_t s = buf.state[l][k];
        return cost[k] <= cut ? static_cast<int32_t>(g.eps_offsets[s + 1] - g.eps_offsets[s])
                              : 0;
      });
      ex.one([&] { sh.count[2] = 0; });
      ex.sync();
      ex.each(total, [&](int64_t j) {
        const int32_t i = owner(frontier, j);
        const int32_t k = front[i], s = buf.state[l][k];
        const int64_t a = g.eps_offsets[s] + (j - buf.scan[i]);
        const double c = cost[k] + g.eps_weight[a];
        if (c > cut) return;
        const int32_t to = g.eps_next[a];
        const uint64_t key = cost_key(c);
        const uint64_t old = ex.atomic_min(&buf.key[to], key);
        if (key >= old) return;
        if (old == kEmptyKey) append(l, to);
        if (ex.atomic_exch(&buf.stamp[to], round) != round) {
          const int32_t p = ex.atomic_add(&sh.count[2], 1);
          if (p < buf.capacity) buf.changed[p] = to;
        }
      });
      ex.sync();
      const int32_t changed = sh.count[2] < buf.capacity ? sh.count[2] : buf.capacity;
      if (sh.count[2] > buf.capacity || sh.count[l] > buf.capacity) {
        ex.one([&] { sh.count[3] |= kTokensOverflow; });
      }
      ex.each(changed, [&](int64_t c) { buf.bp[buf.changed[c]] = kNoBackpointer; });
      ex.sync();
      ex.each(total, [&](int64_t j) {
        const int32_t i = owner(frontier, j);
        const int32_t k = front[i], s = buf.state[l][k];
        const int64_t a = g.eps_offsets[s] + (j - buf.scan[i]);
        const double c = cost[k] + g.eps_weight[a];
        const int32_t to = g.eps_next[a];
        if (c > cut || buf.stamp[to] != round || cost_key(c) != buf.key[to]) return;
        ex.atomic_min(&buf.bp[to], (static_cast<uint64_t>(k) << 32) |
                                       static_cast<uint32_t>(-(a + 2)));
      });
      ex.sync();
      status |= sh.count[3];
      if (arena_used + changed > buf.arena) status |= kArenaOverflow;
      if (status) break;
      const int32_t base = arena_used;
      ex.each(changed, [&](int64_t c) {  // entries first: their sources may change below
        int32_t k, arc;
        unpack(buf.bp[buf.changed[c]], &k, &arc);
        buf.arena_prev[base + c] = buf.entry[l][k];
        buf.arena_arc[base + c] = arc;
      });
      ex.sync();
      ex.each(changed, [&](int64_t c) {
        const int32_t s = buf.changed[c], p = buf.slot[s];
        buf.cost[l][p] = key_cost(buf.key[s]);
        buf.entry[l][p] = base + static_cast<int32_t>(c);
        buf.front[f ^ 1][c] = p;
        buf.bp[s] = kNoBackpointer;
      });
      ex.sync();
      arena_used += changed;
      frontier = changed;
      f ^= 1;
    }
  }

  // Clears the per-state arrays the list's states used.
  OASR_ROW void release(int l, int32_t n) {
    ex.each(n, [&](int64_t i) {
      const int32_t s = buf.state[l][i];
      buf.key[s] = kEmptyKey;
      buf.bp[s] = kNoBackpointer;
      buf.slot[s] = -1;
      buf.stamp[s] = 0;
    });
    ex.sync();
  }

  // -- one frame ------------------------------------------------------------------------------

  // Emitting arcs of list `cur` over `row` into the other list; returns its size.
  OASR_ROW int32_t emit(const float* row, int32_t n) {
    const int nxt = cur ^ 1;
    float adaptive = 0.0f;
    const double cut = cutoff(n, &adaptive);
    const double* cost = buf.cost[cur];
    const int32_t* state = buf.state[cur];
    const int32_t total = ex.scan(n, buf.scan, [&](int64_t k) {
      const int32_t s = state[k];
      return cost[k] < cut ? static_cast<int32_t>(g.emit_offsets[s + 1] - g.emit_offsets[s]) : 0;
    });
    const double best = ex.reduce_min(total, [&](int64_t j) {
      const int32_t k = owner(n, j);
      double w;
      emit_cost(row, cost[k], g.emit_offsets[state[k]] + (j - buf.scan[k]), &w);
      return w;
    });
    const double next_cut = best + adaptive;  // Kaldi's running cutoff, at its final value
    ex.one([&] { sh.count[nxt] = 0; });
    ex.sync();
    ex.each(total, [&](int64_t j) {
      const int32_t k = owner(n, j);
      const int64_t a = g.emit_offsets[state[k]] + (j - buf.scan[k]);
      double w;
      emit_cost(row, cost[k], a, &w);
      if (!(w < next_cut)) return;
      const int32_t to = g.emit_next[a];
      if (ex.atomic_min(&buf.key[to], cost_key(w)) == kEmptyKey) append(nxt, to);
    });
    ex.sync();
    ex.each(total, [&](int64_t j) {
      const int32_t k = owner(n, j);
      const int64_t a = g.emit_offsets[state[k]] + (j - buf.scan[k]);
      double w;
      emit_cost(row, cost[k], a, &w);
      const int32_t to = g.emit_next[a];
      if (!(w < next_cut) || cost_key(w) != buf.key[to]) return;
      ex.atomic_min(&buf.bp[to], (static_cast<uint64_t>(k) << 32) | static_cast<uint32_t>(a));
    });
    ex.sync();
    const int32_t m = sh.count[nxt];
    status |= sh.count[3];
    if (m > buf.capacity) status |= kTokensOverflow;
    if (arena_used + m > buf.arena) status |= kArenaOverflow;
    if (status) return 0;
    const int32_t base = arena_used;
    ex.each(m, [&](int64_t p) {
      const int32_t s = buf.state[nxt][p];
      int32_t k, arc;
      unpack(buf.bp[s], &k, &arc);
      buf.cost[nxt][p] = key_cost(buf.key[s]);
      buf.arena_prev[base + p] = buf.entry[cur][k];
      buf.arena_arc[base + p] = arc;
      buf.entry[nxt][p] = base + static_cast<int32_t>(p);
      buf.front[0][p] = static_cast<int32_t>(p);
      buf.bp[s] = kNoBackpointer;
    });
    ex.sync();
    arena_used += m;
    cur = nxt;
    closure(cur, next_cut, m);
    const int32_t size = sh.count[cur] < buf.capacity ? sh.count[cur] : buf.capacity;
    release(cur, size);
    return size;
  }

  // -- the row --------------------------------------------------------------------------------

  OASR_ROW void run() {
    ex.one([&] {
      sh.count[0] = 1;
      sh.count[1] = 0;
      sh.count[3] = 0;
      buf.state[0][0] = g.start;
      buf.cost[0][0] = 0.0;
      buf.entry[0][0] = 0;
      buf.front[0][0] = 0;
      buf.arena_prev[0] = -1;
      buf.arena_arc[0] = kStartArc;
      buf.key[g.start] = cost_key(0.0);
      buf.slot[g.start] = 0;
    });
    ex.sync();
    arena_used = 1;
    cur = 0;
    closure(0, static_cast<double>(std::numeric_limits<float>::max()), 1);  // Kaldi's start
    int32_t n = sh.count[0] < buf.capacity ? sh.count[0] : buf.capacity;
    release(0, n);  // a list's per-state keys are cleared once it is complete
    for (int32_t t = 0; t < io.num_frames && !status; ++t) {
      n = emit(io.log_probs + static_cast<int64_t>(io.frames[t]) * io.vocab, n);
    }
    finish(status ? 0 : n);
  }

  // Kaldi's GetBestPath: among tokens in a final state the cheapest with its final cost, else
  // the cheapest; the lowest index on a tie.
  OASR_ROW void finish(int32_t n) {
    const double* cost = buf.cost[cur];
    const int32_t* state = buf.state[cur];
    const double final_best = ex.reduce_min(n, [&](int64_t i) {
      const float f = g.final_cost[state[i]];
      return f == kInfF ? kInf : cost[i] + f;
    });
    const bool reached = final_best != kInf;
    const double best = reached ? final_best : ex.reduce_min(n, [&](int64_t i) { return cost[i]; });
    ex.one([&] { sh.count[2] = 0x7fffffff; });
    ex.sync();
    ex.each(n, [&](int64_t i) {
      const float f = g.final_cost[state[i]];
      const double c = reached ? (f == kInfF ? kInf : cost[i] + f) : cost[i];
      if (c == best) ex.atomic_min_i32(&sh.count[2], static_cast<int32_t>(i));
    });
    ex.sync();
    ex.one([&] {
      int32_t st = status | (reached ? kReachedFinal : 0);
      int32_t len = 0;
      if (!status && (n == 0 || sh.count[2] == 0x7fffffff)) st |= kNoToken;
      if (!(st & (kTokensOverflow | kArenaOverflow | kNoToken))) {
        for (int32_t e = buf.entry[cur][sh.count[2]]; e >= 0; e = buf.arena_prev[e]) {
          if (buf.arena_arc[e] == kStartArc) continue;
          if (len == io.path_capacity) {
            st |= kPathOverflow;
            break;
          }
          io.path[len++] = buf.arena_arc[e];
        }
        *io.path_cost = best;
      }
      *io.path_length = len;
      *io.status = st;
    });
    ex.sync();
  }
};

// The serial executor: the CPU statement of the device code.
struct HostExec {
  template <class F>
  void each(int64_t n, F&& f) const {
    for (int64_t i = 0; i < n; ++i) f(i);
  }
  void sync() const {}
  template <class F>
  void one(F&& f) const {
    f();
  }
  template <class F>
  double reduce_min(int64_t n, F&& f) const {
    double m = kInf;
    for (int64_t i = 0; i < n; ++i) {
      const double v = f(i);
      if (v < m) m = v;
    }
    return m;
  }
  // out[i] = sum of deg(0..i-1) for i <= n; returns the total.
  template <class F>
  int32_t scan(int64_t n, int32_t* out, F&& deg) const {
    int32_t s = 0;
    for (int64_t i = 0; i < n; ++i) {
      out[i] = s;
      s += deg(i);
    }
    out[n] = s;
    return s;
  }
  static int32_t atomic_add(int32_t* p, int32_t v) {
    const int32_t old = *p;
    *p += v;
    return old;
  }
  static void atomic_or(int32_t* p, int32_t v) { *p |= v; }
  static int32_t atomic_exch(int32_t* p, int32_t v) {
    const int32_t old = *p;
    *p = v;
    return old;
  }
  static uint64_t atomic_min(uint64_t* p, uint64_t v) {
    const uint64_t old = *p;
    if (v < old) *p = v;
    return old;
  }
  static void atomic_min_i32(int32_t* p, int32_t v) {
    if (v < *p) *p = v;
  }
};

}  // namespace oasr::wfst
