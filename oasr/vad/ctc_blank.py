"""A detector from the CTC head's own output: P(speech) = 1 - P(blank) per encoder frame.

It reads a tensor the ASR produced, so it can only judge audio the encoder has already seen:
``posthoc`` (drop or split decoded output) and ``stream`` (endpoints), never ``presegment``.
CTC posteriors are peaky: inside a word the blank wins most frames between the token spikes,
so a short blank run is not a pause. ``min_silence_floor_ms`` is the shortest run the segmenter
and the endpointer may treat as silence (about two inter-word gaps of a 40 ms-frame encoder).
"""

from __future__ import annotations

import torch

from oasr.vad.spec import SpeechDetector, SpeechProbs, VadSpec

# Blank runs inside fluent speech reach ~200 ms between spikes on 40 ms-frame CTC encoders.
CTC_SILENCE_FLOOR_MS = 300.0


class CtcBlankVad(SpeechDetector):
    """``detect_from_asr(log_probs (B, T, V), lengths (B,), seconds_per_frame)``."""

    def __init__(self, blank_id: int = 0, device: str | torch.device = "cpu") -> None:
        self.blank_id = blank_id

    def detect_from_asr(self, tensor: torch.Tensor, lengths: torch.Tensor,
                        seconds_per_frame: float) -> SpeechProbs:
        if tensor.dim() != 3:
            raise ValueError(f"expected log-probs (B, T, V), got shape {tuple(tensor.shape)}")
        probs = 1.0 - tensor[..., self.blank_id].float().exp()
        valid = torch.arange(tensor.shape[1], device=tensor.device) < lengths.to(
            tensor.device)[:, None]
        return SpeechProbs((probs * valid).clamp_(0.0, 1.0), lengths.to(torch.long).cpu(),
                           seconds_per_frame)


CTC_BLANK_SPEC = VadSpec(
    "ctc_blank", CtcBlankVad, consumes="log_probs", modes=("stream", "posthoc"),
    min_silence_floor_ms=CTC_SILENCE_FLOOR_MS,
)
