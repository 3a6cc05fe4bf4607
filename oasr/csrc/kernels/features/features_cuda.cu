// libfeatures_cuda: the feature frontends' launchers (extern "C", raw pointers, a stream last;
// each returns a cudaError_t as int). Built by oasr/kernels/jit.py from its spec in oasr/ops/build.py; the FFT between
// the framing and the mel kernels is cuFFT through torch.fft.rfft.
#include <climits>
#include <cstdint>

#include "common/api.cuh"
#include "common/signatures.cuh"
#include "features/framing.cuh"
#include "features/logmel.cuh"

namespace oasr::kernels::features {
namespace {

constexpr int kFramesPerBlock = 4;  // warps per block, one frame each
constexpr size_t kMaxSharedBytes = 48 * 1024;  // without the opt-in attribute

inline bool grid_for(int64_t n_frames, int frames_per_block, unsigned* blocks) {
  const int64_t n = (n_frames + frames_per_block - 1) / frames_per_block;
  if (n > INT_MAX) return false;
  *blocks = static_cast<unsigned>(n);
  return true;
}

template <typename T>
int mel_log(const void* spec, int64_t rows, int64_t frames_per_row, int spec_stride, int n_bins,
            const int32_t* starts, const int32_t* offsets, const T* weights, int n_mels,
            int magnitude, int log_kind, float floor, const int64_t* frame_lens, float* out,
            int64_t out_ld, unsigned* row_max, cudaStream_t stream) {
  if (rows < 0 || frames_per_row < 0 || n_bins < 1 || spec_stride < n_bins || n_mels < 1 ||
      out_ld < n_mels || log_kind < kLogNone || log_kind > kLog10) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t n_frames = rows * frames_per_row;
  if (n_frames == 0) return 0;
  const size_t per_frame = static_cast<size_t>(n_bins) * sizeof(T);
  int warps = static_cast<int>(kMaxSharedBytes / per_frame);
  warps = warps < kFramesPerBlock ? warps : kFramesPerBlock;
  unsigned blocks = 0;
  if (warps < 1 || !grid_for(n_frames, warps, &blocks)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  MelJob<T> job;
  job.spec = static_cast<const typename Complex<T>::type*>(spec);
  job.starts = starts;
  job.offsets = offsets;
  job.weights = weights;
  job.frame_lens = frame_lens;
  job.out = out;
  job.row_max = row_max;
  job.frames_per_row = frames_per_row;
  job.out_ld = out_ld;
  job.spec_stride = spec_stride;
  job.n_bins = n_bins;
  job.n_mels = n_mels;
  job.log_kind = log_kind;
  job.floor = floor;
  job.magnitude = magnitude != 0;
  mel_log_kernel<T><<<blocks, warps * kWarp, warps * per_frame, stream>>>(job, n_frames);
  OASR_RETURN_LAST_ERROR();
}

}  // namespace
}  // namespace oasr::kernels::features

using namespace oasr::kernels::features;

// Kaldi frames (fp64, the FFT's input) and, where energy is not null, each frame's log energy.
OASR_API int oasr_features_kaldi_frames(
    const float* wave, int64_t batch, int64_t total, const int64_t* frame_lens,
    const float* noise, const float* window, int span, int hop, int fft_size, int64_t n_out,
    float audio_scale, float dither, int remove_dc, float preemph, int raw_energy,
    float log_energy_floor, double* frames, float* energy, int64_t energy_ld,
    cudaStream_t stream) {
  if (batch < 0 || n_out < 0 || span < 2 || hop < 1 || fft_size < span ||
      (n_out > 0 && total < span + (n_out - 1) * hop)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t n_frames = batch * n_out;
  if (n_frames == 0) return 0;
  unsigned blocks = 0;
  if (!grid_for(n_frames, kFramesPerBlock, &blocks)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  KaldiFraming p;
  p.wave = wave;
  p.frame_lens = frame_lens;
  p.noise = noise;
  p.window = window;
  p.frames = frames;
  p.energy = energy;
  p.total = total;
  p.n_out = n_out;
  p.energy_ld = energy_ld;
  p.span = span;
  p.hop = hop;
  p.fft_size = fft_size;
  p.audio_scale = audio_scale;
  p.dither = dither;
  p.preemph = preemph;
  p.log_energy_floor = log_energy_floor;
  p.remove_dc = remove_dc != 0;
  p.raw_energy = raw_energy != 0;
  kaldi_frames_kernel<<<blocks, kFramesPerBlock * kWarp, 0, stream>>>(p, n_frames);
  OASR_RETURN_LAST_ERROR();
}

// Whisper frames (fp32): centered, reflect-padded, periodic-Hann-windowed.
OASR_API int oasr_features_whisper_frames(
    const float* wave, int64_t batch, int64_t total, const int64_t* lengths, const float* window,
    int n_fft, int hop, int fft_size, int64_t window_samples, int64_t n_frames_per_row,
    float* frames, cudaStream_t stream) {
  if (batch < 0 || total < 0 || n_fft < 2 || hop < 1 || fft_size < n_fft ||
      n_frames_per_row < 0 || window_samples <= n_fft / 2) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t n_frames = batch * n_frames_per_row;
  if (n_frames == 0) return 0;
  unsigned blocks = 0;
  if (!grid_for(n_frames, kFramesPerBlock, &blocks)) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  WhisperFraming p;
  p.wave = wave;
  p.lengths = lengths;
  p.window = window;
  p.frames = frames;
  p.total = total;
  p.window_samples = window_samples;
  p.n_frames = n_frames_per_row;
  p.n_fft = n_fft;
  p.hop = hop;
  p.fft_size = fft_size;
  whisper_frames_kernel<<<blocks, kFramesPerBlock * kWarp, 0, stream>>>(p, n_frames);
  OASR_RETURN_LAST_ERROR();
}

// Mel + log over an fp32 (complex64) spectrum; row_max, when not null, must start zeroed.
OASR_API int oasr_features_mel_log_f32(
    const void* spec, int64_t rows, int64_t frames_per_row, int spec_stride, int n_bins,
    const int32_t* starts, const int32_t* offsets, const float* weights, int n_mels,
    int magnitude, int log_kind, float floor, const int64_t* frame_lens, float* out,
    int64_t out_ld, unsigned* row_max, cudaStream_t stream) {
  return mel_log<float>(spec, rows, frames_per_row, spec_stride, n_bins, starts, offsets,
                        weights, n_mels, magnitude, log_kind, floor, frame_lens, out, out_ld,
                        row_max, stream);
}

// Mel + log over an fp64 (complex128) spectrum.
OASR_API int oasr_features_mel_log_f64(
    const void* spec, int64_t rows, int64_t frames_per_row, int spec_stride, int n_bins,
    const int32_t* starts, const int32_t* offsets, const double* weights, int n_mels,
    int magnitude, int log_kind, float floor, const int64_t* frame_lens, float* out,
    int64_t out_ld, unsigned* row_max, cudaStream_t stream) {
  return mel_log<double>(spec, rows, frames_per_row, spec_stride, n_bins, starts, offsets,
                         weights, n_mels, magnitude, log_kind, floor, frame_lens, out, out_ld,
                         row_max, stream);
}

// (max(x, row_max - range) + 4) / 4 over (batch, per_row) features, in place.
OASR_API int oasr_features_whisper_normalize(float* feats, const unsigned* row_max,
                                             int64_t batch, int64_t per_row, float range,
                                             cudaStream_t stream) {
  if (batch < 0 || per_row < 0) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t total = batch * per_row;
  if (total == 0) return 0;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 1 << 20;  // grid-stride past that
  const bool vec = per_row % 4 == 0 && reinterpret_cast<uintptr_t>(feats) % 16 == 0;
  const int64_t n = vec ? total / 4 : total;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  blocks = blocks < kMaxBlocks ? blocks : kMaxBlocks;
  if (vec) {
    whisper_normalize_kernel<float4><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        reinterpret_cast<float4*>(feats), row_max, per_row / 4, n, range);
  } else {
    whisper_normalize_kernel<float><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        feats, row_max, per_row, n, range);
  }
  OASR_RETURN_LAST_ERROR();
}

OASR_EXPORT_SIGNATURES(features_cuda, OASR_SIGNATURE(oasr_features_kaldi_frames),
                       OASR_SIGNATURE(oasr_features_whisper_frames),
                       OASR_SIGNATURE(oasr_features_mel_log_f32),
                       OASR_SIGNATURE(oasr_features_mel_log_f64),
                       OASR_SIGNATURE(oasr_features_whisper_normalize))
