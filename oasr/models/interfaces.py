"""What a model must implement to serve each decode family.

``CAPABILITIES`` maps a family name to the dotted attribute paths it calls on the model, each
with a one-line why. ``require_capability`` checks a model against it once, at engine
construction, so a checkpoint advertising a family it cannot serve fails there naming the
missing members, never at the first request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Capability:
    family: str
    members: tuple[tuple[str, str], ...]  # (dotted attribute path, why it is needed)


def _cap(family: str, **members: str) -> Capability:
    return Capability(family, tuple((k.replace("__", "."), v) for k, v in members.items()))


CAPABILITIES: dict[str, Capability] = {
    # Label-synchronous attention encoder-decoder (Whisper): the incremental AR protocol.
    "aed": _cap(
        "aed",
        encode_offline="features -> encoder hidden states",
        decoder__prefill="encode the SOT prompt and cache the cross-attention K/V per row",
        decoder__step="one batched decoder step over the row-indexed KV cache",
        decoder__select="index_select rows of the decoder state (retirement, beam reorder)",
    ),
    # Frame-synchronous CTC: encoder and head fused into log-probs.
    "ctc": _cap(
        "ctc",
        forward_offline="features -> CTC log-probs (B, T, V), the fused encoder+head path",
        config__blank_id="the CTC blank's id (no default: a wrong blank decodes garbage)",
    ),
    # U2 / U2++: CTC prefix-beam n-best, then one teacher-forced attention-decoder pass.
    "ctc_aed_rescoring": _cap(
        "ctc_aed_rescoring",
        encode_offline="features -> (encoder hidden states, their lengths)",
        ctc_log_probs="hidden states -> CTC log-probs (B, T, V) for the prefix beam",
        attention_scores="one batched teacher-forced pass scoring every row's n-best",
        config__blank_id="the CTC blank's id (no default: a wrong blank decodes garbage)",
    ),
}


class MissingCapabilityError(TypeError):
    pass


def _has_path(obj: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def missing_members(model: Any, family: str) -> list[str]:
    if family not in CAPABILITIES:
        raise KeyError(
            f"no capability declared for decode family {family!r}; valid: "
            f"{', '.join(sorted(CAPABILITIES))}"
        )
    return [path for path, _ in CAPABILITIES[family].members if not _has_path(model, path)]


def require_capability(model: Any, family: str) -> None:
    """Raise naming every member ``model`` lacks for ``family``."""
    missing = missing_members(model, family)
    if missing:
        why = dict(CAPABILITIES[family].members)
        detail = "; ".join(f"{m} ({why[m]})" for m in missing)
        raise MissingCapabilityError(
            f"{type(model).__name__} cannot serve decode family {family!r}: missing {detail}"
        )
