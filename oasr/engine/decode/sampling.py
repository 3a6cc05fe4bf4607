"""Next-token selection on the device: a batched argmax, or per-row filtered draws.

Greedy rows take one batched argmax. Sampled rows are filtered (temperature, top-k, top-p) and
drawn on the device, each with its own generator so a seeded request draws the same tokens
whatever it is batched with, and land by slice assignment: no host sync is added.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowSampling:
    temperature: float
    top_k: int | None
    top_p: float | None
    generator: torch.Generator | None


def filter_logits(logits: torch.Tensor, s: RowSampling) -> torch.Tensor:
    """logits (N, V) float -> filtered logits at temperature ``s.temperature``."""
    x = logits / s.temperature
    if s.top_k is not None and s.top_k < x.shape[-1]:
        kth = torch.topk(x, s.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if s.top_p is not None and s.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True, dim=-1)
        probs = torch.softmax(sorted_x, dim=-1)
        # Drop a token when the mass before it already reaches top_p (the first always stays).
        drop_sorted = (probs.cumsum(-1) - probs) >= s.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x


def select_next_tokens(logits: torch.Tensor,
                       sampling: dict[int, RowSampling] | None = None) -> torch.Tensor:
    """logits (B, V) -> tokens (B,): argmax, except rows in ``sampling`` which draw."""
    tokens = logits.argmax(dim=-1)
    if not sampling:
        return tokens
    tokens = tokens.clone()
    for r in sorted(sampling):
        s = sampling[r]
        probs = torch.softmax(filter_logits(logits[r:r + 1].float(), s), dim=-1)
        # A draw from probs as argmax(probs / E), E ~ Exp(1) (the exponential race): device
        # work only. A host-built row index or multinomial's checks would sync every step.
        race = torch.empty_like(probs).exponential_(1.0, generator=s.generator)
        tokens[r:r + 1] = (probs / race).argmax(dim=-1)  # an int slice: no index upload
    return tokens
