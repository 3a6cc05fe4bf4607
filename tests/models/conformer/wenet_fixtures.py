"""The WeNet reference folders under ``tests/fixtures/wenet_tiny/`` and their reference outputs.

Each ``<variant>/`` is a tiny random WeNet model saved by upstream WeNet in its own layout, with
upstream reference outputs beside it; ``test_model_parity.py``'s docstring says how they were
made.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "wenet_tiny"
VARIANTS = ("u2pp_conv2d4", "causal_conv2d8", "conv2d6_static_chunk")


def fixture_dir(variant: str) -> Path:
    return FIXTURES / variant


def reference(variant: str) -> dict[str, torch.Tensor]:
    return load_file(str(fixture_dir(variant) / "reference.safetensors"))


def reference_hyps(ref: dict[str, torch.Tensor]) -> list[list[list[int]]]:
    """The fixture's hypotheses (padded with -1, length -1 = no hypothesis) as nested lists."""
    out = []
    for b in range(ref["hyps"].shape[0]):
        row = []
        for i in range(ref["hyps"].shape[1]):
            n = int(ref["hyp_lens"][b, i])
            if n >= 0:
                row.append(ref["hyps"][b, i, :n].tolist())
        out.append(row)
    return out
