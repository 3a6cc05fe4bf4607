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


_HEADS = (("decoder.", "predictor."), ("joiner.", "joiner."), ("ctc_output.1.", "ctc."))
# Training-only tensors of icefall's AsrModel (the pruned loss' simple projections).
_TRAINING_ONLY = ("simple_am_proj.", "simple_lm_proj.")


def model_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An icefall ``AsrModel`` state dict under ``ZipformerModel``'s names; an unknown key
    (an attention decoder, a newer head) raises naming it."""
    out = {f"encoder.{k}": v for k, v in encoder_state_dict(state).items()}
    for key, value in state.items():
        if key.startswith(("encoder_embed.", "encoder.")) or key.startswith(_TRAINING_ONLY):
            continue
        for src, dst in _HEADS:
            if key.startswith(src):
                out[dst + key[len(src):]] = value
                break
        else:
            raise KeyError(f"icefall checkpoint key {key!r} has no place in the Zipformer model "
                           "(attention-decoder heads are not supported)")
    return out
