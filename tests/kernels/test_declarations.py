"""The in-tree kernels are declared by name (``oasr.kernels.declarations``): each name resolves
to the binding's function, each source file exists, each library is a registered build spec."""

from __future__ import annotations

from pathlib import Path

from oasr import ops
from oasr.kernels import declarations

REPO = Path(__file__).resolve().parents[2]
DECLARED = {"ctc_prefix_beam", "dtw_starts", "fbank", "mfcc", "whisper_logmel",
            "paged_attention", "lstm"}


def test_every_declared_kernel_loads_from_its_binding():
    kernels = {op: k for op, k in ops.registered_kernels().items() if op in DECLARED}
    assert set(kernels) == DECLARED
    for op, kernel in kernels.items():
        assert isinstance(kernel.fn, str) and kernel.fn.startswith("oasr.kernels."), op
        loaded = kernel.load()
        assert callable(loaded.fn) and callable(loaded.supports), op
        assert loaded.native is None or callable(loaded.native), op
        assert (REPO / kernel.source).is_file(), kernel.source
        assert kernel.library is not None and ops.LIBRARIES[kernel.library.name] is kernel.library


def test_the_gaps_at_the_kernels_edges_are_declared_with_the_bindings_limits():
    from oasr.kernels import ctc_cuda, dtw_cuda, features_cuda

    for gap in (declarations.CTC_BEAM_WIDTH, declarations.DTW_ROWS,
                declarations.FEATURES_LARGE_FFT):
        assert ops.KERNEL_GAPS[gap.id] is gap
    assert ctc_cuda.MAX_BEAM == declarations.MAX_BEAM and str(ctc_cuda.MAX_BEAM) in (
        declarations.CTC_BEAM_WIDTH.what)
    assert dtw_cuda.MAX_ROWS == declarations.MAX_ROWS
    assert features_cuda.FEATURES_LARGE_FFT is declarations.FEATURES_LARGE_FFT
