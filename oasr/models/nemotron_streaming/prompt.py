"""The language prompt of a prompted Nemotron checkpoint: ``linear_2(relu(linear_1([h; onehot])))``
per encoder frame, the one-hot of the target language's slot broadcast over time."""

from __future__ import annotations

import torch
from torch import nn

from oasr.layers.activation import Relu
from oasr.layers.linear import Linear

__all__ = ["PromptProjector"]


class PromptProjector(nn.Module):
    def __init__(self, d_model: int, num_prompts: int, hidden: int) -> None:
        super().__init__()
        self.num_prompts = num_prompts
        self.linear_1 = Linear(d_model + num_prompts, hidden)
        self.relu = Relu()
        self.linear_2 = Linear(hidden, d_model)

    def forward(self, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """x (B, T, C) encoder frames, slots (B,) prompt indices -> (B, T, C)."""
        onehot = torch.nn.functional.one_hot(slots.to(x.device), self.num_prompts).to(x.dtype)
        onehot = onehot[:, None, :].expand(-1, x.shape[1], -1)
        return self.linear_2(self.relu(self.linear_1(torch.cat([x, onehot], dim=-1))))
