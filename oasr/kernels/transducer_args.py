"""The transducer greedy kernel's arguments: the tensors a model declares for it and one
search's bounds. Shared by the CUDA binding (``oasr.kernels.transducer_cuda``) and its caller
(``oasr.engine.decode.transducer_fused``), so neither imports the other for the types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["FusedTensors", "GreedyLimits"]


@dataclass(frozen=True)
class FusedTensors:
    """A stateless predictor's label-window embedding and grouped conv, and an additive
    joiner's decoder projection and output layer (``out(act(enc_proj + dec_proj))``)."""

    embedding: torch.Tensor  # (V, D)
    conv: torch.Tensor | None  # (D, D / groups, C), None for a window of one label
    dec_w: torch.Tensor  # (J, D)
    dec_b: torch.Tensor | None
    out_w: torch.Tensor  # (V, J)
    out_b: torch.Tensor | None
    groups: int
    relu: bool
    blank: int

    def cast(self, dtype: torch.dtype, device: torch.device) -> FusedTensors:
        def to(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.detach().to(device=device, dtype=dtype).contiguous()

        return FusedTensors(to(self.embedding), to(self.conv), to(self.dec_w), to(self.dec_b),
                            to(self.out_w), to(self.out_b), self.groups, self.relu, self.blank)


@dataclass(frozen=True)
class GreedyLimits:
    """One search's bounds: ``unk`` (never emitted; the blank when the model has none),
    ``max_sym`` labels a frame, ``cap`` labels a row in the output buffer."""

    unk: int
    max_sym: int
    cap: int


