// CTC prefix beam search on the GPU: one thread block continues one stream's beam over a chunk
// of frames. Framework-free CUDA C++.
//
// The search is the CPU one's, step for step (oasr/csrc/host/ctc/prefix_beam.h states it): per decoded
// frame, every (top token u, live prefix h) pair, tokens outer and prefixes inner, updates the
// next frame's prefixes; equal scores rank by which prefix the pairs touched first; the best
// beam_size survive; blank skipping with the replay of a skipped frame between equal tokens.
// Doubles throughout, as on the CPU.
//
// In parallel, per frame: thread j < n emulates, in touch order, the (at most three) pairs
// that reach live prefix j (blank, the same token again, the extension from j's parent); one
// thread per (u, i) builds the new prefix h_i + u unless it lands on a live one. Each candidate
// carries (score, first touch), a strict order; a candidate's rank is the number of candidates
// ahead of it (a few hundred comparisons on a beam of 10, cheaper than sorting them), and the
// first beam_size ranks survive. Warp 0 materialises them: a new prefix takes its sequence's
// trie node if one was made before (a walk of its parent's children), else a node appended
// with one ballot, as are frame nodes. Four barriers per frame; the next frame's input is loaded while this one
// decodes, into the other of two buffers.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <math_constants.h>

#include "ctc/beam_state.cuh"
#include "ctc/topk.cuh"

namespace oasr::kernels::ctc {

constexpr int kBeamThreads = 256;
constexpr int kBeamWarps = kBeamThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ double log_add(double a, double b) {
  if (a == -CUDART_INF) return b;
  if (b == -CUDART_INF) return a;
  return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

__device__ __forceinline__ double viterbi(const BeamEntry& h) { return h.vb > h.vnb ? h.vb : h.vnb; }
__device__ __forceinline__ int32_t best_frames(const BeamEntry& h) {
  return h.vb > h.vnb ? h.frames_b : h.frames_nb;
}

__device__ __forceinline__ bool cand_better(double ta, int fa, double tb, int fb) {
  return ta > tb || (ta == tb && fa < fb);
}

// A frame's top tokens in shared memory (see FrameTops).
struct FrameTop {
  int32_t ids[kMaxBeam];
  float vals[kMaxBeam];
  float next[kMaxBeam];
  int32_t count;
  float blank_lp;
};

constexpr int kMaxCands = (kMaxBeam + 1) * kMaxBeam;
constexpr int kRankAll = 192;  // up to this many candidates, rank each against all

// Member q of the wide-beam sample: live prefixes [0, n), then cur[0] + top[iu] for iu < k,
// then cur[i] + top[0] for 1 <= i < n (candidate indices as in StepShared::cand_total).
__device__ __forceinline__ int sample_member(int q, int n, int k) {
  if (q < n) return q;
  if (q < n + k) return n + (q - n) * n;
  return n + (q - n - k + 1);
}

struct StepShared {
  BeamEntry cur[2][kMaxBeam];
  BeamEntry e_next[kMaxBeam];     // live prefixes' entries for the next frame
  int32_t e_pend_prev[kMaxBeam];  // their token-ending best path found this frame (its frames)
  int32_t e_pend_iu[kMaxBeam];    // ... and the top index of its token (-1: none)
  double cand_total[kMaxCands];   // [0, n): live prefixes; n + iu * n + i: cur[i] + top[iu]
  int32_t cand_ft[kMaxCands];     // first touch; INT_MAX: no candidate
  int32_t sel[kMaxBeam];          // candidate index of each survivor, best first
  int32_t pend_node[kMaxBeam];
  int32_t pend_tok[kMaxBeam];
  FrameTop top[2];                // the frame being decoded and the next one
  FrameTop saved;                 // the last skipped frame (replayed between equal tokens)
  int32_t n_cur;
  int32_t n_finite;
  int32_t n_pass;                 // wide beams: candidates reaching the sample's bound
  int32_t theta;                  // ... and the bound (a candidate index; -1: none)
  int32_t pass[kMaxCands];
  int32_t pend_count;
};

// Decodes one frame t_abs whose top tokens are f. has_next: f.next holds the tokens' log-probs
// at t_abs + 1 (posteriors are max over t, t + 1); otherwise the new frame nodes wait in the
// pending list for the next chunk.
__device__ void beam_step(StepShared& s, SlotScalars& sc, int& buf, const BeamPool& pool,
                          int slot, const FrameTop& f, int t_abs, bool has_next, int blank) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const BeamEntry* cur = s.cur[buf];
  const int n = s.n_cur;
  const int k = f.count;
  const int beam = pool.beam_size;

  // Candidates. Live prefixes: their (at most three) touches in the CPU's order.
  if (tid < n) {
    const int j = tid;
    const BeamEntry& h = cur[j];
    BeamEntry e;
    e.pb = e.pnb = e.vb = e.vnb = -CUDART_INF;
    e.node = h.node;
    e.parent = h.parent;
    e.token = h.token;
    e.frames_b = e.frames_nb = -1;
    int pend_iu = -1, pend_prev = -1;
    // Where the blank, j's last token and j's parent sit (-1: absent).
    int ib = -1, it = -1, ip = -1;
    for (int u = 0; u < k; ++u) {
      ib = f.ids[u] == blank ? u : ib;
      it = f.ids[u] == h.token ? u : it;
    }
    for (int i = 0; i < n; ++i) ip = cur[i].node == h.parent ? i : ip;
    // The pairs reaching j, keyed by touch order (INT_MAX: absent): (blank, j), (last token,
    // j) and (last token, parent of j), the last one second in its pair when it repeats.
    const int key_blank = ib >= 0 ? 2 * (ib * n + j) : INT_MAX;
    const int key_same = it >= 0 ? 2 * (it * n + j) : INT_MAX;
    const int key_ext = (it >= 0 && ip >= 0)
                            ? 2 * (it * n + ip) + (cur[ip].token == h.token ? 1 : 0)
                            : INT_MAX;
    const int ft = min(key_blank, min(key_same, key_ext));
    // The touches in order: a three-element sorting network over (key, kind).
    int k0 = key_blank, k1 = key_same, k2 = key_ext, w0 = 0, w1 = 1, w2 = 2;
    if (k1 < k0) { const int a = k0; k0 = k1; k1 = a; const int b = w0; w0 = w1; w1 = b; }
    if (k2 < k1) { const int a = k1; k1 = k2; k2 = a; const int b = w1; w1 = w2; w2 = b; }
    if (k1 < k0) { const int a = k0; k0 = k1; k1 = a; const int b = w0; w0 = w1; w1 = b; }
#pragma unroll
    for (int q = 0; q < 3; ++q) {
      const int key = q == 0 ? k0 : (q == 1 ? k1 : k2);
      const int kind = q == 0 ? w0 : (q == 1 ? w1 : w2);
      if (key == INT_MAX) break;
      if (kind == 0) {  // blank: the prefix stays, ending in blank
        const double p = f.vals[ib];
        e.pb = log_add(e.pb, h.total + p);
        e.vb = viterbi(h) + p;
        e.frames_b = best_frames(h);
      } else if (kind == 1) {  // its last token again: the run goes on
        const double p = f.vals[it];
        e.pnb = log_add(e.pnb, h.pnb + p);
        if (e.vnb < h.vnb + p) {
          e.vnb = h.vnb + p;
          e.frames_nb = h.frames_nb;
          pend_iu = -1;
        }
      } else {  // the parent extended by this token
        const BeamEntry& g = cur[ip];
        const double p = f.vals[it];
        const bool repeat = g.token == h.token;
        e.pnb = log_add(e.pnb, (repeat ? g.pb : g.total) + p);
        const double v = (repeat ? g.vb : viterbi(g)) + p;
        if (e.vnb < v) {
          e.vnb = v;
          pend_iu = it;
          pend_prev = repeat ? g.frames_b : best_frames(g);
        }
      }
    }
    double tot = -CUDART_INF;
    if (ft != INT_MAX) {
      tot = log_add(e.pb, e.pnb);
      if (tot != tot) tot = -CUDART_INF;
    }
    e.total = tot;
    s.cand_total[j] = tot;
    s.cand_ft[j] = ft;
    s.e_next[j] = e;
    s.e_pend_iu[j] = pend_iu;
    s.e_pend_prev[j] = pend_prev;
  }
  // New prefixes h_i + top[iu].
  for (int c = tid; c < k * n; c += kBeamThreads) {
    const int iu = c / n, i = c - iu * n;
    const int u = f.ids[iu];
    double tot = -CUDART_INF;
    int ft = INT_MAX;
    const BeamEntry& h = cur[i];
    bool live = false;  // h + u is already a live prefix: it was scored above
    for (int j = 0; j < n; ++j) live |= cur[j].parent == h.node && cur[j].token == u;
    if (u != blank && !live) {
      const bool repeat = u == h.token;
      tot = (repeat ? h.pb : h.total) + static_cast<double>(f.vals[iu]);
      if (tot != tot) tot = -CUDART_INF;
      ft = 2 * c + (repeat ? 1 : 0);
    }
    s.cand_total[n + c] = tot;
    s.cand_ft[n + c] = ft;
  }
  __syncthreads();

  // Selection: a finite candidate's rank is how many candidates are ahead of it.
  const int m = (k + 1) * n;
  if (m <= kRankAll) {
    for (int c = tid; c < m; c += kBeamThreads) {
      const double tc = s.cand_total[c];
      const int fc = s.cand_ft[c];
      if (fc == INT_MAX || tc == -CUDART_INF) continue;
      int rank = 0;
#pragma unroll 8
      for (int o = 0; o < m; ++o) rank += cand_better(s.cand_total[o], s.cand_ft[o], tc, fc);
      if (rank < beam) s.sel[rank] = c;
      atomicAdd(&s.n_finite, 1);
    }
  } else {
    // Wide beams: a sample's beam-th best bounds the survivors from below (beam candidates
    // are at least that good), so only the candidates reaching it are ranked, among
    // themselves (whoever is ahead of one of them reaches it too). The sample: the live
    // prefixes, the best prefix's extensions and every prefix's extension by the best token.
    const int ns = n + k + n - 1;
    for (int q = tid; q < ns; q += kBeamThreads) {
      const int c = sample_member(q, n, k);
      const double tc = s.cand_total[c];
      const int fc = s.cand_ft[c];
      if (fc == INT_MAX || tc == -CUDART_INF) continue;
      int rank = 0;
      for (int o = 0; o < ns; ++o) {
        const int co = sample_member(o, n, k);
        rank += cand_better(s.cand_total[co], s.cand_ft[co], tc, fc);
      }
      if (rank == beam - 1) s.theta = c;
    }
    __syncthreads();
    const int th = s.theta;
    const double tt = th >= 0 ? s.cand_total[th] : 0.0;
    const int ft_th = th >= 0 ? s.cand_ft[th] : 0;
    for (int c = tid; c < m; c += kBeamThreads) {
      const double tc = s.cand_total[c];
      const int fc = s.cand_ft[c];
      if (fc == INT_MAX || tc == -CUDART_INF) continue;
      atomicAdd(&s.n_finite, 1);
      if (th < 0 || !cand_better(tt, ft_th, tc, fc)) s.pass[atomicAdd(&s.n_pass, 1)] = c;
    }
    __syncthreads();
    const int np = s.n_pass;
    for (int q = tid; q < np; q += kBeamThreads) {
      const int c = s.pass[q];
      const double tc = s.cand_total[c];
      const int fc = s.cand_ft[c];
      int rank = 0;
      for (int o = 0; o < np; ++o) {
        const int co = s.pass[o];
        rank += cand_better(s.cand_total[co], s.cand_ft[co], tc, fc);
      }
      if (rank < beam) s.sel[rank] = c;
    }
  }
  __syncthreads();

  // Warp 0: the survivors become the next beam.
  if (warp == 0) {
    const int kept = min(beam, s.n_finite);
    const bool valid = lane < kept;
    BeamEntry e;
    int pend_iu = -1, pend_prev = -1;
    if (valid) {
      const int c = s.sel[lane];
      if (c < n) {
        e = s.e_next[c];
        pend_iu = s.e_pend_iu[c];
        pend_prev = s.e_pend_prev[c];
      } else {
        const int iu = (c - n) / n, i = (c - n) - iu * n;
        const BeamEntry& g = cur[i];
        const int u = f.ids[iu];
        const double p = f.vals[iu];
        const bool repeat = u == g.token;
        e.pb = e.vb = -CUDART_INF;
        e.pnb = (repeat ? g.pb : g.total) + p;
        e.total = s.cand_total[c];
        e.node = -1;
        e.parent = g.node;
        e.token = u;
        e.frames_b = e.frames_nb = -1;
        const double v = (repeat ? g.vb : viterbi(g)) + p;
        e.vnb = -CUDART_INF;
        if (-CUDART_INF < v) {
          e.vnb = v;
          pend_iu = iu;
          pend_prev = repeat ? g.frames_b : best_frames(g);
        }
      }
    }
    const unsigned below = (1u << lane) - 1u;
    const int64_t base = static_cast<int64_t>(slot) * pool.capacity;
    // The survivors are distinct sequences, so no two lanes look for the same (parent, token)
    // and every walk reads only children made in earlier frames. (A parent past the capacity
    // exists only in a slot already void.)
    if (valid && e.node < 0 && e.parent < pool.capacity) {
      for (int c = pool.trie_child[base + e.parent]; c >= 0; c = pool.trie_sibling[base + c]) {
        if (pool.trie_token[base + c] == e.token) {
          e.node = c;
          break;
        }
      }
    }
    const unsigned need_node = __ballot_sync(kFull, valid && e.node < 0);
    const unsigned need_frame = __ballot_sync(kFull, valid && pend_iu >= 0);
    if (valid && e.node < 0) {
      const int node = sc.trie_size + __popc(need_node & below);
      if (node < pool.capacity) {
        pool.trie_parent[base + node] = e.parent;
        pool.trie_token[base + node] = e.token;
        pool.trie_child[base + node] = -1;
        pool.trie_sibling[base + node] = atomicExch(&pool.trie_child[base + e.parent], node);
      } else {
        sc.error = kTrieFull;
      }
      e.node = node;
    }
    if (valid && pend_iu >= 0) {
      const int q = __popc(need_frame & below);
      const int fr = sc.frame_size + q;
      if (fr < pool.capacity) {
        float lp = f.vals[pend_iu];
        if (has_next) {
          lp = fmaxf(lp, f.next[pend_iu]);
        } else {
          s.pend_node[q] = fr;
          s.pend_tok[q] = e.token;
        }
        pool.frame_prev[base + fr] = pend_prev;
        pool.frame_t[base + fr] = t_abs;
        pool.frame_lp[base + fr] = lp;
      } else {
        sc.error = kFramesFull;
      }
      e.frames_nb = fr;
    }
    if (valid) s.cur[buf ^ 1][lane] = e;
    if (lane == 0) {
      s.n_cur = kept;
      s.n_finite = 0;
      s.n_pass = 0;
      s.theta = -1;
      sc.trie_size += __popc(need_node);
      sc.frame_size += __popc(need_frame);
      s.pend_count = has_next ? 0 : __popc(need_frame);
    }
  }
  __syncthreads();
  buf ^= 1;
}

}  // namespace oasr::kernels::ctc
