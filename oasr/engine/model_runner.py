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
    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """features (B, T, F) -> encoder hidden states (B, T', C) in the model dtype."""
        return self.model.encode_offline(features.to(self.dtype), lengths)
