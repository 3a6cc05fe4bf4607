"""The ``parakeet_logmel`` frontend declaration: the offline extractor
(``oasr.features.parakeet_logmel``) and, for ``normalize='none'`` (Nemotron's cache-aware
checkpoints), its chunk-by-chunk form and end-of-input flush
(``oasr.features.parakeet_streaming``; per-feature normalization is refused there by name)."""

from __future__ import annotations

from oasr.features.parakeet_logmel import parakeet_logmel
from oasr.features.parakeet_streaming import parakeet_logmel_flush, parakeet_logmel_streaming
from oasr.features.spec import ExtractorSpec

__all__ = ["PARAKEET_LOGMEL"]

PARAKEET_LOGMEL = ExtractorSpec(
    kind="parakeet_logmel",
    fn=parakeet_logmel,
    framing=None,  # per-utterance normalization reads the whole row
    streaming_fn=parakeet_logmel_streaming,
    flush_fn=parakeet_logmel_flush,
    defaults={"n_fft": 512, "preemphasis": 0.97, "normalize": "per_feature"},
    doc=("NeMo / Parakeet log-mel: 0.97 pre-emphasis, 25 ms symmetric Hann in a 512-point STFT "
         "every 10 ms, Slaney mels, log(x + 2^-24), per-utterance per-feature normalization "
         "(normalize='none' also streams)."),
)
