"""ModelRunner: owns the model on its device and dtype and runs the encoder forward."""

from __future__ import annotations

from typing import Any

import torch


class ModelRunner:
    def __init__(self, model: Any, device: torch.device | str, dtype: torch.dtype) -> None:
        self.device = torch.device(device)
        self.dtype = dtype
        self.model = model.to(device=self.device, dtype=dtype).eval()

    @torch.inference_mode()
    def encode(self, features: torch.Tensor, lengths: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """features (B, T, F) -> encoder hidden states (B, T', C) in the model dtype and their
        lengths (B,), or ``None`` for a model whose encoder returns the states alone (Whisper
        reads its whole fixed window)."""
        out = self.model.encode_offline(features.to(self.dtype), lengths)
        if isinstance(out, tuple):
            hidden, hidden_lens = out
            return hidden, hidden_lens
        return out, None

    @torch.inference_mode()
    def forward(self, features: torch.Tensor, lengths: torch.Tensor, consumes: str
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What a decode family consumes: ``"log_probs"`` runs the fused encoder + CTC head
        (``forward_offline`` -> log-probs (B, T', V) and lengths); ``"hidden"`` and ``"both"``
        run the encoder alone (a ``"both"`` family applies the CTC head itself)."""
        if consumes == "log_probs":
            log_probs, out_lens = self.model.forward_offline(features.to(self.dtype), lengths)
            return log_probs, out_lens
        return self.encode(features, lengths)
