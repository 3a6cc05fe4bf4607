"""Feature-frontend declarations: ``ExtractorSpec``, ``StreamingFraming``, ``FeatureConfig``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StreamingFraming:
    """The frontend's frame grid for streaming, in samples.

    span: samples one frame reads; hop: samples between frames; history: samples kept from the
    previous chunk; prefill: samples needed before the first frame.
    """

    span: int
    hop: int
    history: int = 0
    prefill: int = 0


@dataclass(frozen=True)
class ExtractorSpec:
    """One feature frontend.

    fn: ``(waveforms (B, T) fp32, lengths (B,), FeatureConfig) -> (feats (B, T', F), lens (B,))``.
    framing: the streaming frame grid; ``None`` means the frontend cannot stream (it normalizes
        over a fixed window), which is what ``supports_streaming`` derives from.
    streaming_fn: ``(audio (T,), state | None, FeatureConfig) -> (feats (T', F), state)``, the
        chunk-by-chunk form whose outputs concatenate to the offline features.
    flush_fn: ``(state | None, FeatureConfig) -> feats (T', F)``, the frames still held when
        the input ends (those whose window reads past the last sample); ``None``: a frontend
        whose last frames need no flush (Kaldi's ``snip_edges`` drops them offline too).
    window_seconds_attr: the ``FeatureConfig`` field holding a fixed input window, for
        frontends where every row costs the same whatever its length.
    defaults: values of ``FeatureConfig.params`` keys a config may omit.
    """

    kind: str
    fn: Callable[..., Any]
    framing: StreamingFraming | None = None
    window_seconds_attr: str | None = None
    streaming_fn: Callable[..., Any] | None = None
    flush_fn: Callable[..., Any] | None = None
    doc: str = ""
    defaults: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def supports_streaming(self) -> bool:
        return self.framing is not None


@dataclass
class FeatureConfig:
    """A materialized frontend configuration; ``feature_type`` names a registered extractor.

Every option that changes a value is a field here or a key of ``params`` (the extractor's
``defaults`` list them: Kaldi fbank's ``snip_edges``, ``low_freq`` / ``high_freq``,
``dither``, ``window_type``, ``energy_floor``, ``preemph_coeff``, ``remove_dc_offset``,
``raw_energy``, ``use_energy``, ``use_log_fbank``, ``round_to_power_of_two``, ...). Build one
for an upstream recipe with ``oasr.features.recipes``; bundles store ``complete()``.

    ``lfr_m`` / ``lfr_n``: low-frame-rate stacking (``oasr.features.lfr``), applied by the engine
    over the extractor's output: ``lfr_m`` frames stacked every ``lfr_n``; 1 / 1 is off.
    """

    feature_type: str
    sample_rate: int = 16000
    num_mel_bins: int = 80
    frame_shift_ms: float = 10.0
    frame_length_ms: float = 25.0
    lfr_m: int = 1
    lfr_n: int = 1
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from oasr.features import EXTRACTORS

        if self.feature_type not in EXTRACTORS:
            # Raises naming the registered kinds.
            EXTRACTORS.get(self.feature_type)
        if self.lfr_m < 1 or self.lfr_n < 1:
            raise ValueError(f"lfr_m and lfr_n must be >= 1, got lfr_m={self.lfr_m}, "
                             f"lfr_n={self.lfr_n}")

    def complete(self) -> FeatureConfig:
        """This config with every option its extractor reads written out (the extractor's
        ``defaults`` where ``params`` omit one): what a bundle records, so the values a
        checkpoint was converted with never move when a default does. A config written before
        an option existed reads that option's default, which is the value it was computed
        with (an option is added with the default that keeps the old values)."""
        return dataclasses.replace(self, params={**self.spec.defaults, **self.params})

    @property
    def lfr(self) -> bool:
        """Whether low-frame-rate stacking applies (``lfr_m`` or ``lfr_n`` above 1)."""
        return self.lfr_m > 1 or self.lfr_n > 1

    @property
    def spec(self) -> ExtractorSpec:
        from oasr.features import EXTRACTORS

        return EXTRACTORS.get(self.feature_type)

    @property
    def fixed_window_seconds(self) -> float | None:
        attr = self.spec.window_seconds_attr
        if attr is None:
            return None
        if attr in self.params:
            return float(self.params[attr])
        if attr in self.spec.defaults:
            return float(self.spec.defaults[attr])
        return float(getattr(self, attr))

    @property
    def fixed_window_frames(self) -> int | None:
        secs = self.fixed_window_seconds
        if secs is None:
            return None
        return int(round(secs * 1000.0 / self.frame_shift_ms))
