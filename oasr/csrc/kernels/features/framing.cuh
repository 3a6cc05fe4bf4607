// Per-frame preprocessing of the feature frontends: waveform rows -> windowed frames, zero-padded
// to the FFT size, one warp per frame. Framework-free CUDA C++.
//
// Arithmetic mirrors the torch oracles (oasr/features/kaldi.py, whisper_logmel.py) op for op:
// every fp32 product and sum is rounded on its own (__fmul_rn / __fadd_rn keep nvcc from fusing
// them into FMAs), so a frame matches the torch frame bit for bit except where the oracle
// reduces (the DC mean, the energy), which sum here in double.
#pragma once

#include <cfloat>
#include <cstdint>

#include <cuda_runtime.h>

namespace oasr::kernels::features {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Kaldi framing (snip_edges): frame f of row b reads samples [f * hop, f * hop + span).
struct KaldiFraming {
  const float* wave;          // (batch, total)
  const int64_t* frame_lens;  // (batch,) valid frames per row
  const float* noise;         // (batch, n_out, span) N(0, 1) draws, or null without dither
  const float* window;        // (span,)
  double* frames;             // (batch, n_out, fft_size): the FFT input
  float* energy;              // log energy of frame g at energy[g * energy_ld], or null
  int64_t total;
  int64_t n_out;              // frames per row in the output
  int64_t energy_ld;
  int span;
  int hop;
  int fft_size;
  float audio_scale;
  float dither;
  float preemph;              // 0: none
  float log_energy_floor;     // -inf: none
  bool remove_dc;
  bool raw_energy;            // energy before preemphasis and window (Kaldi's default)
};

// Blocks of blockDim.x / 32 frames. Frames past a row's count write only their energy (0): the
// mel kernel zeroes their features without reading their spectrum.
__global__ void kaldi_frames_kernel(KaldiFraming p, int64_t n_frames) {
  const int lane = threadIdx.x % kWarp;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (g >= n_frames) return;  // warp-uniform
  const int64_t b = g / p.n_out;
  const int64_t f = g - b * p.n_out;
  if (f >= p.frame_lens[b]) {
    if (p.energy != nullptr && lane == 0) p.energy[g * p.energy_ld] = 0.0f;
    return;
  }
  const float* x = p.wave + b * p.total + f * p.hop;
  const float* noise = p.noise != nullptr ? p.noise + g * p.span : nullptr;
  auto sample = [&](int i) {
    float v = __fmul_rn(x[i], p.audio_scale);
    if (noise != nullptr) v = __fadd_rn(v, __fmul_rn(p.dither, noise[i]));
    return v;
  };

  float mean = 0.0f;
  if (p.remove_dc) {
    double s = 0.0;
    for (int i = lane; i < p.span; i += kWarp) s += sample(i);
    mean = static_cast<float>(warp_sum(s) / p.span);
  }

  double energy = 0.0;
  float carry = 0.0f;  // the previous chunk's last sample, for lane 0's preemphasis
  double* out = p.frames + g * p.fft_size;
  for (int base = 0; base < p.span; base += kWarp) {
    const int i = base + lane;
    float v = 0.0f;
    if (i < p.span) {
      v = sample(i);
      if (p.remove_dc) v = __fsub_rn(v, mean);
    }
    // Kaldi's preemphasis: x[i] - c x[i-1], and x[0] - c x[0] first.
    float prev = __shfl_up_sync(kFullMask, v, 1);
    if (lane == 0) prev = base == 0 ? v : carry;
    carry = __shfl_sync(kFullMask, v, kWarp - 1);
    if (i < p.span) {
      if (p.raw_energy) energy += __fmul_rn(v, v);
      float w = p.preemph != 0.0f ? __fsub_rn(v, __fmul_rn(p.preemph, prev)) : v;
      w = __fmul_rn(w, p.window[i]);
      if (!p.raw_energy) energy += __fmul_rn(w, w);
      out[i] = w;
    }
  }
  for (int i = p.span + lane; i < p.fft_size; i += kWarp) out[i] = 0.0;
  if (p.energy != nullptr) {
    energy = warp_sum(energy);
    if (lane == 0) {
      const float e = logf(fmaxf(static_cast<float>(energy), FLT_EPSILON));
      p.energy[g * p.energy_ld] = fmaxf(e, p.log_energy_floor);
    }
  }
}

// Whisper framing: each row keeps its first lengths[b] samples (zeros after, up to the window of
// window_samples), is reflect-padded by n_fft / 2 on both sides, and frame f reads the padded
// samples [f * hop, f * hop + n_fft), times the periodic Hann window.
struct WhisperFraming {
  const float* wave;       // (batch, total)
  const int64_t* lengths;  // (batch,) samples
  const float* window;     // (n_fft,)
  float* frames;           // (batch, n_frames, fft_size)
  int64_t total;
  int64_t window_samples;
  int64_t n_frames;        // frames per row
  int n_fft;
  int hop;
  int fft_size;            // >= n_fft; zero past n_fft
};

__global__ void whisper_frames_kernel(WhisperFraming p, int64_t n_frames) {
  const int lane = threadIdx.x % kWarp;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (g >= n_frames) return;
  const int64_t b = g / p.n_frames;
  const int64_t f = g - b * p.n_frames;
  const int64_t w = p.window_samples;
  int64_t len = p.lengths[b];
  len = len < 0 ? 0 : len;
  len = len < w ? len : w;
  len = len < p.total ? len : p.total;  // samples past the batch width are zeros too
  const float* x = p.wave + b * p.total;
  const int64_t first = f * p.hop - p.n_fft / 2;
  float* out = p.frames + g * p.fft_size;
#pragma unroll 4
  for (int i = lane; i < p.fft_size; i += kWarp) {
    float v = 0.0f;
    if (i < p.n_fft) {
      int64_t j = first + i;
      j = j < 0 ? -j : (j >= w ? 2 * (w - 1) - j : j);  // reflect: the edge sample not repeated
      v = __fmul_rn(j < len ? x[j] : 0.0f, p.window[i]);
    }
    out[i] = v;
  }
}

}  // namespace oasr::kernels::features
