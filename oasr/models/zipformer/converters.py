"""icefall checkpoint keys -> ours: ``encoder_embed.*`` -> ``embed.*``, ``encoder.*`` ->
``stacks.*``, and the subsampler's ``conv.{0,4,7}`` -> ``conv{1,2,3}``."""

from __future__ import annotations

import torch

_PREFIXES = (("encoder_embed.conv.0.", "embed.conv1."), ("encoder_embed.conv.4.", "embed.conv2."),
             ("encoder_embed.conv.7.", "embed.conv3."), ("encoder_embed.", "embed."),
             ("encoder.", "stacks."))


def encoder_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder's tensors of an icefall model state dict, under our names."""
    out = {}
    for key, value in state.items():
        for src, dst in _PREFIXES:
            if key.startswith(src):
                out[dst + key[len(src):]] = value
                break
    return out
