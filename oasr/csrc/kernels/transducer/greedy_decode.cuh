// The transducer greedy decode of one utterance, written once for two executors: a CUDA block
// (one CTA per row, oasr/csrc/kernels/transducer/transducer_cuda.cu) and a serial host loop
// (csrc/transducer, the CPU path and the test bench of the same code). Framework-free: plain
// pointers, no torch, no CUDA outside the __CUDACC__ sections.
//
// The model is icefall's stateless transducer as the contract declares it
// (TransducerPredictor.stateless_tensors(), Joiner.additive_tensors()): the predictor embeds
// the last C labels (-1: none, a zero row), a grouped conv (D -> D, kernel C, no bias) and ReLU
// when C > 1; the joiner is out(act(enc_proj + dec_proj(pred))), tanh or ReLU. The encoder half
// of the joint (enc_proj, B x T x J) is computed before the call (one GEMM).
//
// Semantics are those of oasr.engine.decode.transducer_search.greedy_frames: at each frame up
// to max_sym labels; blank or unk move on to the next frame; each label records its frame,
// its posterior (the softmax of the logits at emission) and adds its logit to the score.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define OASR_HD __host__ __device__
#define OASR_HD_NOWARN _Pragma("nv_exec_check_disable")
#else
#define OASR_HD
#define OASR_HD_NOWARN
#endif

namespace oasr::transducer {

constexpr int kMaxContext = 8;

template <class W>
struct GreedyArgs {
  const W* enc;            // (B, T, J) the projected encoder frames
  const int64_t* lengths;  // (B,) frames per row, clamped to [0, T]
  const W* embedding;      // (V, D)
  const W* conv;           // (D, D / groups, C), or null when C == 1
  const W* dec_w;          // (J, D)
  const W* dec_b;          // (J,) or null
  const W* out_w;          // (V, J)
  const W* out_b;          // (V,) or null
  int B, T, J, D, V, C, groups;
  int blank, unk, max_sym;
  int relu;  // the joiner's activation: 0 tanh, 1 ReLU
  int cap;   // labels a row may record; a row that emits more reports cap + 1
  int32_t* tokens;  // (B, cap)
  int32_t* frames;  // (B, cap)
  float* probs;     // (B, cap)
  int32_t* counts;  // (B,) labels recorded, cap + 1 on overflow
  float* scores;    // (B,) the sum of the emitted logits
};

// Floats of scratch one row needs: the joint input, logits, decoder projection, predictor out.
OASR_HD inline int scratch_floats(int J, int D, int V) { return 2 * J + V + D; }

OASR_HD inline float to_float(float x) { return x; }
#ifdef __CUDACC__
__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
#endif

// The executor's primitives: each() runs f(i) for i < n (split across the block's threads on the
// device), dot_rows() out[r] = bias[r] + w[r, :] . x, argmax() the first maximum, sum_exp() the
// sum of exp(x - m), sync() a barrier, and one() a section run by a single thread.
struct HostExec {
  template <class F>
  void each(int n, F&& f) const {
    for (int i = 0; i < n; ++i) f(i);
  }
  template <class W>
  void dot_rows(float* out, const W* w, const W* bias, const float* x, int rows, int k) const {
    for (int r = 0; r < rows; ++r) {
      // Eight partial sums, which the compiler can keep in one vector register.
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      const W* row = w + static_cast<int64_t>(r) * k;
      int i = 0;
      for (; i + 8 <= k; i += 8) {
        for (int l = 0; l < 8; ++l) acc[l] += to_float(row[i + l]) * x[i + l];
      }
      for (; i < k; ++i) acc[0] += to_float(row[i]) * x[i];
      float sum = 0.f;
      for (int l = 0; l < 8; ++l) sum += acc[l];
      out[r] = sum + (bias ? to_float(bias[r]) : 0.f);
    }
  }
  int argmax(const float* x, int n, float* best) const {
    int arg = 0;
    float m = x[0];
    for (int i = 1; i < n; ++i) {
      if (x[i] > m || (x[i] != x[i] && m == m)) {  // NaN wins, as in torch.argmax
        m = x[i];
        arg = i;
      }
    }
    *best = m;
    return arg;
  }
  float sum_exp(const float* x, int n, float m) const {
    float s = 0.f;
    for (int i = 0; i < n; ++i) s += std::exp(x[i] - m);
    return s;
  }
  void sync() const {}
  template <class F>
  void one(F&& f) const {
    f();
  }
};

template <class W, class Exec>
struct RowDecoder {
  const GreedyArgs<W>& a;
  const Exec& ex;
  int b;
  float* h;       // (J,) act(enc + dec)
  float* logits;  // (V,)
  float* dec;     // (J,) the decoder projection of the current window
  float* pred;    // (D,) the predictor output
  int* window;    // (C,) the label window

  OASR_HD_NOWARN OASR_HD void predict() const {
    const int C = a.C, D = a.D;
    if (C == 1) {
      const W* e = a.embedding + static_cast<int64_t>(window[0]) * D;
      ex.each(D, [&](int o) { pred[o] = to_float(e[o]); });
    } else {
      const int per = D / a.groups;  // channels per group, in and out
      ex.each(D, [&](int o) {
        const int g0 = (o / per) * per;
        const W* w = a.conv + static_cast<int64_t>(o) * per * C;  // (per, C) for output o
        float acc = 0.f;
        for (int k = 0; k < C; ++k) {
          const int label = window[k];
          if (label < 0) continue;  // no label yet: a zero embedding
          const W* e = a.embedding + static_cast<int64_t>(label) * D + g0;
          for (int i = 0; i < per; ++i) acc += to_float(w[i * C + k]) * to_float(e[i]);
        }
        pred[o] = acc > 0.f ? acc : 0.f;
      });
    }
    ex.sync();
    ex.dot_rows(dec, a.dec_w, a.dec_b, pred, a.J, D);
    ex.sync();
  }

  OASR_HD_NOWARN OASR_HD void run() const {
    const int C = a.C, J = a.J, V = a.V;
    int64_t len = a.lengths[b];
    len = len < 0 ? 0 : (len > a.T ? a.T : len);
    ex.one([&] {
      for (int k = 0; k < C - 1; ++k) window[k] = -1;
      window[C - 1] = a.blank;
    });
    ex.sync();
    predict();
    int count = 0;
    float score = 0.f;
    for (int64_t t = 0; t < len; ++t) {
      const W* enc = a.enc + (static_cast<int64_t>(b) * a.T + t) * J;
      for (int s = 0; s < a.max_sym; ++s) {
        ex.each(J, [&](int j) {
          const float z = to_float(enc[j]) + dec[j];
          h[j] = a.relu ? (z > 0.f ? z : 0.f) : tanhf(z);
        });
        ex.sync();
        ex.dot_rows(logits, a.out_w, a.out_b, h, V, J);
        ex.sync();
        float m;
        const int best = ex.argmax(logits, V, &m);
        if (best == a.blank || best == a.unk) break;
        const float post = 1.f / ex.sum_exp(logits, V, m);
        score += logits[best];
        const int slot = count;
        ex.one([&] {
          if (slot < a.cap) {
            const int64_t at = static_cast<int64_t>(b) * a.cap + slot;
            a.tokens[at] = best;
            a.frames[at] = static_cast<int32_t>(t);
            a.probs[at] = post;
          }
          for (int k = 0; k + 1 < C; ++k) window[k] = window[k + 1];
          window[C - 1] = best;
        });
        ++count;
        ex.sync();
        predict();
      }
    }
    ex.one([&] {
      a.counts[b] = count > a.cap ? a.cap + 1 : count;
      a.scores[b] = score;
    });
  }
};

}  // namespace oasr::transducer
