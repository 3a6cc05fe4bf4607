"""icefall's stateless transducer parts: a label-window predictor and the additive joiner.

Module and parameter names are icefall's (``decoder.embedding``, ``decoder.conv``,
``joiner.encoder_proj`` / ``decoder_proj`` / ``output_linear``), so an icefall state dict's
``decoder.*`` / ``joiner.*`` entries load unchanged.

The predictor's state is the label window: the last ``context_size`` labels per stream,
(B, context_size) int64, ``-1`` where the history is shorter (a zero embedding), starting as
``[-1] * (context_size - 1) + [blank_id]``.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.layers.activation import Relu, Tanh
from oasr.layers.conv import Conv1d
from oasr.layers.embedding import Embedding
from oasr.layers.linear import Linear
from oasr.models.base import Joiner, TransducerPredictor

__all__ = ["AdditiveJoiner", "StatelessPredictor"]


class StatelessPredictor(TransducerPredictor):
    """Embedding of the label window, then (``context_size > 1``) a grouped conv over it and ReLU.

    The conv has groups = decoder_dim // 4 (icefall's group size 4) and no bias.
    """

    def __init__(self, vocab_size: int, decoder_dim: int, blank_id: int,
                 context_size: int) -> None:
        super().__init__()
        if context_size < 1:
            raise ValueError(f"context_size must be >= 1, got {context_size}")
        self.vocab_size, self.decoder_dim = vocab_size, decoder_dim
        self.blank_id, self.context_size = blank_id, context_size
        self.embedding = Embedding(vocab_size, decoder_dim)
        self.conv = (Conv1d(decoder_dim, decoder_dim, context_size, groups=decoder_dim // 4,
                            bias=False) if context_size > 1 else None)
        self.relu = Relu()

    def forward(self, window: torch.Tensor) -> torch.Tensor:
        """window (B, context_size) int64 labels (-1: none) -> (B, decoder_dim)."""
        emb = self.embedding(window.clamp(min=0)) * (window >= 0).unsqueeze(-1)
        if self.conv is None:
            return emb[:, -1]
        return self.relu(self.conv(emb))[:, -1]

    def init_state(self, batch: int, device: torch.device) -> torch.Tensor:
        start = [-1] * (self.context_size - 1) + [self.blank_id]
        return torch.tensor(start, dtype=torch.int64, device=device).repeat(batch, 1)

    def predict(self, state: torch.Tensor) -> torch.Tensor:
        return self(state)

    def advance(self, state: torch.Tensor, tokens: torch.Tensor,
                emitted: torch.Tensor) -> torch.Tensor:
        shifted = torch.cat([state[:, 1:], tokens.to(state.dtype).unsqueeze(1)], dim=1)
        return torch.where(emitted.unsqueeze(1), shifted, state)

    def stack_states(self, states: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(states, dim=0)

    def unstack_states(self, state: torch.Tensor) -> list[torch.Tensor]:
        return list(state.split(1, dim=0))

    @property
    def label_window(self) -> int:
        return self.context_size

    def stateless_tensors(self) -> dict[str, torch.Tensor] | None:
        out = {"embedding": self.embedding.weight}
        if self.conv is not None:
            out["conv"] = self.conv.weight
        return out


class AdditiveJoiner(Joiner):
    """``output_linear(tanh(encoder_proj(enc) + decoder_proj(dec)))``.

    ``forward`` takes the projections (``project_encoder`` / ``project_decoder``), so a search
    projects each encoder frame and each predictor output once.
    """

    def __init__(self, encoder_dim: int, decoder_dim: int, joiner_dim: int,
                 vocab_size: int) -> None:
        super().__init__()
        self.encoder_proj = Linear(encoder_dim, joiner_dim)
        self.decoder_proj = Linear(decoder_dim, joiner_dim)
        self.output_linear = Linear(joiner_dim, vocab_size)
        self.tanh = Tanh()

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """(..., encoder_dim) -> (..., joiner_dim)."""
        return self.encoder_proj(enc)

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        """(..., decoder_dim) -> (..., joiner_dim)."""
        return self.decoder_proj(dec)

    def forward(self, enc: torch.Tensor, dec: torch.Tensor) -> torch.Tensor:
        """enc, dec (B, joiner_dim) projections -> logits (B, V)."""
        return self.output_linear(self.tanh(enc + dec))

    def additive_tensors(self) -> dict[str, Any] | None:
        return {"encoder_proj": self.encoder_proj.weight,
                "encoder_proj_bias": self.encoder_proj.bias,
                "decoder_proj": self.decoder_proj.weight,
                "decoder_proj_bias": self.decoder_proj.bias,
                "output_weight": self.output_linear.weight,
                "output_bias": self.output_linear.bias, "activation": "tanh"}
