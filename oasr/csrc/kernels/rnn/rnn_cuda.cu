// librnn_cuda: the recurrent layers' launcher (extern "C", raw pointers, the stream last; it
// returns a cudaError_t as int). Built by oasr/kernels/jit.py from its spec in oasr/ops/build.py.
#include <cstdint>

#include "common/api.cuh"
#include "common/signatures.cuh"
#include "rnn/recurrence.cuh"

using namespace oasr::kernels::rnn;

namespace {

constexpr int kMaxHidden = 1024;  // one hidden unit per thread owns its cell state

template <int MODE>
int launch(const RecurrenceArgs& a, int B, cudaStream_t stream) {
  constexpr int G = MODE == kLstm ? 4 : 1;
  const int gh = G * a.H;
  int threads = ((gh + 31) / 32) * 32;
  if (threads > 1024) threads = 1024;
  const size_t smem = static_cast<size_t>(a.H + gh) * sizeof(float);
  if (smem > 48 * 1024) {
    OASR_CUDA_TRY(cudaFuncSetAttribute(recurrence_kernel<MODE>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  recurrence_kernel<MODE><<<B, threads, smem, stream>>>(a);
  OASR_RETURN_LAST_ERROR();
}

}  // namespace

OASR_API int oasr_rnn_preload() {
  cudaFuncAttributes attr;
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, recurrence_kernel<kLstm>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, recurrence_kernel<kRnnTanh>));
  OASR_CUDA_TRY(cudaFuncGetAttributes(&attr, recurrence_kernel<kRnnRelu>));
  return 0;
}

// mode: 0 LSTM, 1 RNN tanh, 2 RNN relu. H in [1, 1024].
OASR_API int oasr_rnn_recurrence(const float* xw, const float* w_hh_t, const float* h0,
                                 const float* c0, const int64_t* lengths, float* y, float* h_n,
                                 float* c_n, int B, int T, int H, int reverse, int mode,
                                 cudaStream_t stream) {
  if (B <= 0) return 0;
  if (H < 1 || H > kMaxHidden || T < 0) return static_cast<int>(cudaErrorInvalidValue);
  const RecurrenceArgs a{xw, w_hh_t, h0, c0, lengths, y, h_n, c_n, T, H, reverse};
  switch (mode) {
    case kLstm: return launch<kLstm>(a, B, stream);
    case kRnnTanh: return launch<kRnnTanh>(a, B, stream);
    case kRnnRelu: return launch<kRnnRelu>(a, B, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

OASR_EXPORT_SIGNATURES(rnn_cuda, OASR_SIGNATURE(oasr_rnn_preload),
                       OASR_SIGNATURE(oasr_rnn_recurrence))
