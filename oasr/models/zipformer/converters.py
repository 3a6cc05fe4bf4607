"""icefall checkpoint keys -> ours: ``encoder_embed.*`` -> ``embed.*``, ``encoder.*`` ->
``stacks.*``, and the subsampler's ``conv.{0,4,7}`` -> ``conv{1,2,3}``."""

from __future__ import annotations

import torch

from oasr.models.weight_map import Rule, WeightMap

_ENCODER = (("encoder_embed\\.conv\\.0\\.", "embed.conv1."),
            ("encoder_embed\\.conv\\.4\\.", "embed.conv2."),
            ("encoder_embed\\.conv\\.7\\.", "embed.conv3."), ("encoder_embed\\.", "embed."),
            ("encoder\\.", "stacks."))
ENCODER_KEYS = WeightMap(*(Rule(src + "(.*)", dst + r"\1") for src, dst in _ENCODER))
# The whole AsrModel: the encoder under ``encoder.``, the heads renamed, the training-only
# tensors (the pruned loss' simple projections) left out.
MODEL_KEYS = WeightMap(
    *(Rule(src + "(.*)", "encoder." + dst + r"\1") for src, dst in _ENCODER),
    Rule(r"simple_(am|lm)_proj\..*", reason="training-only (pruned RNN-T loss projection)"),
    Rule(r"decoder\.(.*)", r"predictor.\1"),
    Rule(r"joiner\.(.*)", r"joiner.\1"),
    Rule(r"ctc_output\.1\.(.*)", r"ctc.\1"),
)


def encoder_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder's tensors of an icefall model state dict, under our names."""
    return ENCODER_KEYS.rename(state)[0]


def model_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An icefall ``AsrModel`` state dict under ``ZipformerModel``'s names; an unknown key
    (an attention decoder, a newer head) raises naming it."""
    out, unmatched = MODEL_KEYS.rename(state)
    refuse_unmatched(unmatched)
    return out


def refuse_unmatched(unmatched: list[str]) -> None:
    if unmatched:
        raise KeyError(f"icefall checkpoint key {unmatched[0]!r} has no place in the Zipformer "
                       "model (attention-decoder heads are not supported)")
