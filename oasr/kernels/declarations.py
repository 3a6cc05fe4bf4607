"""What the in-tree kernels serve, declared without importing a binding (stdlib only).

Each binding (``ctc_cuda``, ``dtw_cuda``, ``features_cuda``, ``paged_attention``, ``rnn_cuda``,
``transducer_cuda``)
imports torch and loads its library; its ``ops.Kernel`` is declared here by ``"module:attr"``
strings instead, so ``oasr gaps`` lists every kernel, its library's state and the gaps at the
kernels' edges without importing one, and a route imports the binding when it first serves a
call. Importing any binding imports this module first (``oasr/kernels/__init__.py``). The
limits the gaps name are the bindings' too (each binding checks its library agrees).
"""

from __future__ import annotations

from oasr import ops
from oasr.ops.build import (
    CTC_CUDA,
    DTW_CUDA,
    FEATURES_CUDA,
    PAGED_DECODE,
    QUANT_CUDA,
    RNN_CUDA,
    TRANSDUCER_CUDA,
)

__all__ = ["CTC_BEAM_WIDTH", "DTW_ROWS", "FEATURES_LARGE_FFT", "MAX_BEAM", "MAX_ROWS",
           "MAX_SPECTRUM_BYTES", "QUANT_ROWS_LAYOUT", "TRANSDUCER_SCRATCH"]

MAX_BEAM = 32  # ctc_cuda keeps a beam in one warp
MAX_ROWS = 4000  # dtw_cuda's kMaxRows: three diagonals of floats in shared memory
# The mel kernel keeps one frame's spectrum per warp in shared memory, under the 48 KiB a block
# gets without opting in (features_cuda.cu's kMaxSharedBytes).
MAX_SPECTRUM_BYTES = 48 * 1024

CTC_BEAM_WIDTH = ops.declare_gap(ops.KernelGap(
    id="ctc-beam-width",
    what=f"CTC prefix beam search wider than {MAX_BEAM} (the kernel keeps a beam in one warp)",
    fix="oasr/csrc/kernels/ctc/prefix_beam.cuh: merge multi-warp beam lists (the CPU search "
        "serves it)",
))
DTW_ROWS = ops.declare_gap(ops.KernelGap(
    id="dtw-rows",
    what=f"DTW of a cost matrix with more than {MAX_ROWS} token rows (the kernel keeps three "
         "anti-diagonals of the grid in shared memory); the host DTW serves it",
    fix="oasr/csrc/kernels/alignment/dtw.cuh: keep the diagonals in global memory past the "
        "shared-memory bound",
))
FEATURES_LARGE_FFT = ops.declare_gap(ops.KernelGap(
    id="features-large-fft",
    what=f"feature frontends whose spectrum exceeds {MAX_SPECTRUM_BYTES} bytes per frame "
         "(Kaldi FFTs past 12288 points: frames past 8192 samples, 512 ms at 16 kHz); the torch "
         "path serves them",
    fix="oasr/csrc/kernels/features/logmel.cuh: stage the spectrum in chunks, or opt in to more "
        "shared memory per block",
))

QUANT_ROWS_LAYOUT = ops.declare_gap(ops.KernelGap(
    id="quant-rows-layout",
    what="per-token fp8 quantization of an activation block that is not 2-D with unit column "
         "stride, or not fp32/fp16/bf16; the torch statement serves it",
    fix="oasr/kernels/quant_cuda.py: pass strided columns to the kernel (or copy once)",
))
TRANSDUCER_SCRATCH = ops.declare_gap(ops.KernelGap(
    id="transducer-scratch",
    what="transducer greedy search whose one-row scratch (joiner, predictor and vocabulary "
         "floats) exceeds the device's shared memory per block, or on a dtype other than "
         "fp32/fp16/bf16; the graphed torch loop serves it",
    fix="oasr/csrc/kernels/transducer/greedy_decode.cuh: stage the vocabulary logits in global "
        "memory past the shared-memory bound",
))


def _declare(op: str, binding: str, fn: str, library: ops.BuildSpec, source: str,
             supports: str, native: str | None = None) -> None:
    ops.register_kernel(ops.Kernel(
        op=op, fn=f"oasr.kernels.{binding}:{fn}", source=source, library=library,
        supports=f"oasr.kernels.{binding}:{supports}", native=native))


# Op ``ctc_prefix_beam`` (routed by oasr.engine.decode.ctc.cuda_search): fn(log_probs, lens,
# blank=, beam_size=, blank_skip_threshold=, nbest=) -> per row the ranked hypotheses; the
# route sees (log_probs, beam_size, nbest). The CPU search (oasr._C.ctc) is its oracle.
_declare("ctc_prefix_beam", "ctc_cuda", "decode_offline", CTC_CUDA,
         "oasr/csrc/kernels/ctc/ctc_cuda.cu", "route_supports")
_declare("dtw_starts", "dtw_cuda", "dtw_starts", DTW_CUDA,
         "oasr/csrc/kernels/alignment/dtw_cuda.cu", "supports")
for _op, _fn, _native in (("fbank", "fbank_cuda", "oasr.features.kaldi:fbank_native"),
                          ("mfcc", "mfcc_cuda", "oasr.features.kaldi:mfcc_native"),
                          ("whisper_logmel", "whisper_logmel_cuda",
                           "oasr.features.whisper_logmel:whisper_logmel_native")):
    _declare(_op, "features_cuda", _fn, FEATURES_CUDA,
             "oasr/csrc/kernels/features/features_cuda.cu", "route_supports", native=_native)
_declare("paged_attention", "paged_attention", "paged_decode", PAGED_DECODE,
         "oasr/csrc/kernels/attention/paged_decode.cu", "supports")
_declare("lstm", "rnn_cuda", "recurrent_layers", RNN_CUDA, "oasr/csrc/kernels/rnn/rnn_cuda.cu",
         "supports")
# Op ``transducer_greedy`` (routed by oasr.engine.decode.transducer_fused): fn(enc, lengths,
# weights, limits) -> (tokens, frames, probs, counts, scores) on the device; the route sees
# (hidden, weights). Its torch path is the family's graphed loop (transducer_graph), which
# needs the predictor and joiner modules, so the kernel declares no native.
_declare("transducer_greedy", "transducer_cuda", "greedy_decode", TRANSDUCER_CUDA,
         "oasr/csrc/kernels/transducer/transducer_cuda.cu", "route_supports")
# Op ``quantize_rows_fp8`` (routed by oasr.quantization.lanes): fn(x) -> (e4m3 (M, K),
# fp32 scales (M, 1)), the scaled-mm lane's activation step in one launch.
_declare("quantize_rows_fp8", "quant_cuda", "quantize_rows_fp8", QUANT_CUDA,
         "oasr/csrc/kernels/quantization/quant_cuda.cu", "supports",
         native="oasr.quantization.numerics:quantize_rows_fp8")
