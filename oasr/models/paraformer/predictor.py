"""The CIF predictor (FunASR ``CifPredictorV2``): per-frame weights, their integrate-and-fire.

``alphas = relu(sigmoid(cif_output(relu(conv(hidden)))) * smooth - noise)``
masked to the valid frames; with ``tail_threshold > 0`` one extra frame of weight
``tail_threshold`` is appended after each row's last valid frame (a zero hidden vector) and the
token count is ``floor(sum(alphas))``, else ``round(sum(alphas))``.

Integrate-and-fire with threshold 1: with ``c_t`` the running sum of alphas (float64, as
FunASR's), token ``k`` takes ``max(0, min(c_t, k + 1) - max(c_{t-1}, k))`` of frame ``t``'s
hidden vector, and fires at the frame where ``floor(c_t)`` passes ``k + 1``. That is FunASR's
``cif_v1`` written as one (K, T) weight matrix instead of prefix-sum differences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from oasr.layers import Conv1d, Linear
from oasr.layers.matmul import bmm
from oasr.models.paraformer.config import ParaformerConfig

__all__ = ["CifOutput", "CifPredictor", "integrate_and_fire"]


@dataclass
class CifOutput:
    """embeds (B, K, C) acoustic embeddings (rows past ``token_lens`` are zeros);
    token_lens (B,) int64; alphas (B, T'') the integrated weights (T'' = T + 1 with a tail);
    fires (B, T'') bool, the frames where a token fired."""

    embeds: torch.Tensor
    token_lens: torch.Tensor
    alphas: torch.Tensor
    fires: torch.Tensor


def integrate_and_fire(hidden: torch.Tensor, alphas: torch.Tensor,
                       num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden (B, T, C), alphas (B, T) -> embeds (B, num_tokens, C), fires (B, T) bool."""
    c = torch.cumsum(alphas.double(), dim=1)
    prev = torch.nn.functional.pad(c[:, :-1], (1, 0))
    fires = torch.floor(c.float()) > torch.floor(prev.float())
    k = torch.arange(num_tokens, device=hidden.device, dtype=torch.float64)[None, :, None]
    w = (torch.minimum(c[:, None, :], k + 1) - torch.maximum(prev[:, None, :], k)).clamp_min(0)
    embeds = bmm(w.to(hidden.dtype), hidden)
    return embeds, fires


class CifPredictor(nn.Module):
    """hidden (B, T, C), lens (B,) -> ``CifOutput``. Module names are FunASR's keys."""

    def __init__(self, cfg: ParaformerConfig) -> None:
        super().__init__()
        self.cif_conv1d = Conv1d(cfg.d_model, cfg.d_model,
                                 cfg.predictor_l_order + cfg.predictor_r_order + 1,
                                 padding=(cfg.predictor_l_order, cfg.predictor_r_order))
        self.cif_output = Linear(cfg.d_model, 1)
        self.smooth_factor = cfg.predictor_smooth_factor
        self.noise_threshold = cfg.predictor_noise_threshold
        self.tail_threshold = cfg.predictor_tail_threshold
        if cfg.predictor_threshold != 1.0:
            raise ValueError(f"CIF threshold {cfg.predictor_threshold}: only 1.0 is implemented")

    def forward(self, hidden: torch.Tensor, lens: torch.Tensor) -> CifOutput:
        b, t, _ = hidden.shape
        mask = (torch.arange(t, device=hidden.device)[None, :] < lens[:, None]).to(hidden.dtype)
        # Padded frames are zeroed so a row's alphas do not depend on the batch around it.
        hidden = hidden * mask[..., None]
        h = torch.relu(self.cif_conv1d(hidden))
        alphas = torch.sigmoid(self.cif_output(h).float()).squeeze(-1)
        alphas = torch.relu(alphas * self.smooth_factor - self.noise_threshold) * mask.float()
        if self.tail_threshold > 0.0:
            tail = nn.functional.one_hot(lens.long(), t + 1).float() * self.tail_threshold
            alphas = nn.functional.pad(alphas, (0, 1)) + tail
            hidden = nn.functional.pad(hidden, (0, 0, 0, 1))
            token_lens = torch.floor(alphas.sum(-1))
        else:
            token_lens = torch.round(alphas.sum(-1))
        token_lens = token_lens.long()
        k = int(token_lens.max()) if b else 0
        embeds, fires = integrate_and_fire(hidden.float(), alphas, k)
        keep = torch.arange(k, device=hidden.device)[None, :] < token_lens[:, None]
        embeds = embeds * keep[..., None]
        return CifOutput(embeds.to(hidden.dtype), token_lens, alphas, fires)
