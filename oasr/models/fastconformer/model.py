"""FastConformer models: the encoder under a CTC head (``FastConformerCtc``); the transducer
heads live in ``transducer.py``.

The surface the ``ctc`` family drives:

* ``encode_offline(features, lengths) -> (hidden, hidden_lens)``
* ``ctc_log_probs(hidden) -> log_probs`` (float32 log-softmax of the head)
* ``forward_offline(features, lengths) -> (log_probs, lens)``
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oasr.layers.linear import Linear
from oasr.models.base import BaseAsrModel
from oasr.models.fastconformer.config import FastConformerConfig
from oasr.models.fastconformer.encoder import FastConformerEncoder

__all__ = ["FastConformerCtc", "FastConformerModel"]


class FastConformerModel(BaseAsrModel):
    """The encoder every head shares; subclasses add the head and declare their family."""

    encoder: FastConformerEncoder
    config: FastConformerConfig
    encoder_cls: type = FastConformerEncoder

    def __init__(self, cfg: FastConformerConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = self.encoder_cls(cfg)

    def encode_offline(self, features: torch.Tensor, lengths: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """features (B, T, F), lengths (B,) -> hidden (B, T', C), hidden_lens (B,) int64."""
        return self.encoder(features, lengths)


class FastConformerCtc(FastConformerModel):
    """Parakeet CTC: ``ctc_head`` hidden -> (B, T', vocab) logits, blank last."""

    decode_families = ("ctc",)

    def __init__(self, cfg: FastConformerConfig) -> None:
        if cfg.head != "ctc":
            raise ValueError(f"FastConformerCtc needs head='ctc', got {cfg.head!r}")
        super().__init__(cfg)
        self.ctc_head = Linear(cfg.d_model, cfg.vocab_size)

    def ctc_log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.ctc_head(hidden).float(), dim=-1)

    def forward_offline(self, features: torch.Tensor, lengths: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, lens = self.encode_offline(features, lengths)
        return self.ctc_log_probs(hidden), lens
