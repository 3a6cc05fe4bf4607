"""The registered Kaldi extractors (``fbank``, ``mfcc``): the offline functions of
``oasr.features.kaldi`` joined with the streaming ones of ``oasr.features.kaldi_streaming``,
here so that neither of those modules imports the other's dependants."""

from __future__ import annotations

from oasr.features.kaldi import FBANK_DEFAULTS, MFCC_DEFAULTS, default_framing, fbank, mfcc
from oasr.features.kaldi_streaming import kaldi_flush, kaldi_streaming
from oasr.features.spec import ExtractorSpec

__all__ = ["FBANK", "MFCC"]


FBANK = ExtractorSpec(
    kind="fbank",
    fn=fbank,
    framing=default_framing(),
    streaming_fn=kaldi_streaming,
    flush_fn=kaldi_flush,
    defaults=dict(FBANK_DEFAULTS),
    doc=(
        "Kaldi fbank: povey-windowed frames of frame_length_ms every "
        "frame_shift_ms, DC removed, preemphasis 0.97, power spectrum, num_mel_bins Kaldi mel "
        "filters from 20 Hz to Nyquist, natural log floored at FLT_EPSILON. Output (B, T', F)."
    ),
)

MFCC = ExtractorSpec(
    kind="mfcc",
    fn=mfcc,
    framing=default_framing(),
    streaming_fn=kaldi_streaming,
    flush_fn=kaldi_flush,
    defaults=dict(MFCC_DEFAULTS),
    doc=(
        "Kaldi MFCC: the fbank log-mel energies through Kaldi's DCT to num_ceps (13), "
        "liftered (22); C0 replaced by the raw log energy (use_energy). Output (B, T', num_ceps)."
    ),
)
