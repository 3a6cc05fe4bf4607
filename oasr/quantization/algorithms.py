"""The weight-preparation algorithms: ``absmax`` and ``smoothquant``.

``absmax`` leaves the weights as they are: each method scales a weight row by its largest
magnitude. ``smoothquant`` (Xiao et al., 2023) first moves activation outliers into the
weights: per input channel j, ``s_j = max|X_j|^a / max|W_j|^(1-a)``; the weight's column j is
multiplied by ``s_j`` and the layer's input divided by it (the ``input_smooth`` buffer), so the
product is unchanged in exact arithmetic and the activation range the quantizer sees is flatter.
Layers a model declares in one ``SmoothingGroup`` (``quantization_layout()``: projections
reading one normed input) share one ``s``, computed over all their weights.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.quantization import QuantAlgorithm
from oasr.quantization.spec import QuantizationSpec

__all__ = ["AbsMax", "SmoothQuant", "smoothing_factors"]

# Bounds on s: a channel that never fires (absmax 0) or a zero weight column keeps s = 1.
_MIN_FACTOR, _MAX_FACTOR = 1e-4, 1e4


class AbsMax(QuantAlgorithm):
    name = "absmax"
    needs_calibration = False

    def smoothing(self, model: Any, layers: dict[str, Any], spec: QuantizationSpec,
                  stats: Any | None) -> dict[str, torch.Tensor]:
        return {}


def smoothing_factors(act_absmax: torch.Tensor, weights: list[torch.Tensor],
                      alpha: float) -> torch.Tensor:
    """s (K,) from the input's per-channel absmax (K,) and the weights (N_i, K) reading it."""
    w_max = torch.stack([w.detach().float().abs().amax(dim=0).cpu() for w in weights]).amax(0)
    act = act_absmax.float()
    s = act.pow(alpha) / w_max.pow(1.0 - alpha)
    dead = (act <= 0) | (w_max <= 0) | ~torch.isfinite(s)
    return torch.where(dead, torch.ones_like(s), s).clamp_(_MIN_FACTOR, _MAX_FACTOR)


class SmoothQuant(QuantAlgorithm):
    name = "smoothquant"
    needs_calibration = True

    def smoothing(self, model: Any, layers: dict[str, Any], spec: QuantizationSpec,
                  stats: Any | None) -> dict[str, torch.Tensor]:
        """A factor for every selected layer: shared within a declared group, the layer's own
        otherwise.

        Raises:
            ValueError: no statistics, or a selected layer the calibration never reached.
        """
        if stats is None:
            raise ValueError("smoothquant needs calibration statistics from real audio: "
                             "oasr convert SRC DST --quantize int8 --algorithm smoothquant "
                             "--calibration MANIFEST")
        unreached = [p for p in layers if p not in stats.absmax]
        if unreached:
            raise ValueError(f"calibration ({stats.source}) never ran {unreached[:5]}; "
                             "calibrate on audio that reaches every selected layer or "
                             "exclude them")
        layout = model.quantization_layout() if hasattr(model, "quantization_layout") else ()
        group_of = {m: g.members for g in layout for m in g.members}
        out: dict[str, torch.Tensor] = {}
        for path in layers:
            if path in out:
                continue
            members = [m for m in group_of.get(path, (path,)) if m in layers]
            # Members read one input: their statistics agree; the max guards hook order.
            act = torch.stack([stats.absmax[m] for m in members]).amax(0)
            s = smoothing_factors(act, [layers[m].weight for m in members],
                                  spec.smoothing_alpha)
            for m in members:
                out[m] = s
        return out
