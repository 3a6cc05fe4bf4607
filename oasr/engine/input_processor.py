"""InputProcessor: request audio -> padded waveforms -> features, on the engine's device.

Low-frame-rate stacking (``FeatureConfig.lfr_m`` / ``lfr_n``) is applied here, over whatever the
extractor produced, so no frontend implements it.
"""

from __future__ import annotations

import numpy as np
import torch

from oasr.engine.request import Request
from oasr.features import FeatureConfig, build_extractor
from oasr.features.lfr import apply_lfr_batch


class InputProcessor:
    """Batches request audio and runs the configured frontend.

    Audio is staged in pinned host memory on CUDA so the upload is asynchronous.
    """

    def __init__(self, feature_config: FeatureConfig, device: torch.device | str) -> None:
        self.config = feature_config
        self.spec = build_extractor(feature_config)
        self.device = torch.device(device)
        self.window_samples: int | None = None
        secs = feature_config.fixed_window_seconds
        if secs is not None:
            self.window_samples = int(round(secs * feature_config.sample_rate))

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    def cost(self, request: Request) -> int:
        """Frames a request's forward costs (after LFR stacking): the fixed window for
        fixed-window frontends."""
        n = request.num_samples if self.window_samples is None else self.window_samples
        hop = self.config.sample_rate * self.config.frame_shift_ms / 1000.0
        return int(np.ceil(np.ceil(n / hop) / self.config.lfr_n))

    def check(self, request: Request) -> None:
        """Refuse audio this frontend cannot serve whole, at admission."""
        if request.num_samples == 0:
            raise ValueError(f"request {request.request_id}: the audio is empty")
        if self.window_samples is not None and request.num_samples > self.window_samples:
            raise ValueError(
                f"request {request.request_id}: {request.num_samples / self.sample_rate:.1f} s "
                f"exceeds the model's {self.window_samples / self.sample_rate:.0f} s window; cut "
                "long recordings into windows (oasr transcribe does this)"
            )

    def __call__(self, requests: list[Request]) -> tuple[torch.Tensor, torch.Tensor]:
        """-> features (B, T', F) fp32 and their lengths (B,), on the engine's device; with LFR,
        (B, ceil(T' / lfr_n), lfr_m * F)."""
        lengths = [r.num_samples for r in requests]
        # A fixed-window frontend zero-fills its window past the batch's width itself
        # (whisper_logmel, on the device), so only the longest row's samples are staged and
        # uploaded: for short utterances a fraction of the 30 s window.
        width = max(lengths)
        if self.window_samples is not None:
            width = min(width, self.window_samples)
        pin = self.device.type == "cuda"
        wav = torch.empty(len(requests), width, dtype=torch.float32, pin_memory=pin)
        host = wav.numpy()  # numpy copies each row in (any dtype, read-only views too)
        for i, r in enumerate(requests):
            n = min(r.num_samples, width)
            host[i, :n] = r.audio[:n]
            host[i, n:] = 0.0
        lens = torch.tensor(lengths, dtype=torch.int64)
        wav = wav.to(self.device, non_blocking=pin)
        lens = lens.to(self.device, non_blocking=pin)
        feats, feat_lens = self.spec.fn(wav, lens, self.config)
        if self.config.lfr:
            feats, feat_lens = apply_lfr_batch(feats, feat_lens, self.config.lfr_m,
                                               self.config.lfr_n)
        return feats, feat_lens
