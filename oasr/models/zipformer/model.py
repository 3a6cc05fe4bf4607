"""icefall's Zipformer ``AsrModel``: the Zipformer2 encoder with a CTC head and / or the
stateless transducer (``StatelessPredictor`` + ``AdditiveJoiner``).

Families: ``transducer`` (the default when the checkpoint has the transducer head) and
``ctc``; a family whose head the checkpoint lacks is refused with a clear error.
"""

from __future__ import annotations

import torch

from oasr.layers.linear import Linear
from oasr.models.base import BaseAsrModel
from oasr.models.transducer.stateless import AdditiveJoiner, StatelessPredictor
from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.encoder import ZipformerEncoder

__all__ = ["ZipformerModel"]


class ZipformerModel(BaseAsrModel):
    decode_families = ("transducer", "ctc")
    encoder: ZipformerEncoder
    predictor: StatelessPredictor
    joiner: AdditiveJoiner
    config: ZipformerConfig

    def __init__(self, cfg: ZipformerConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = ZipformerEncoder(cfg)
        self.decoder = None  # no incremental AR decoder
        if cfg.use_transducer:
            self.predictor = StatelessPredictor(cfg.vocab_size, cfg.decoder_dim, cfg.blank_id,
                                                cfg.context_size)
            self.joiner = AdditiveJoiner(cfg.output_dim, cfg.decoder_dim, cfg.joiner_dim,
                                         cfg.vocab_size)
        if cfg.use_ctc:
            self.ctc = Linear(cfg.output_dim, cfg.vocab_size)

    @property
    def default_decode_type(self) -> str:
        return "transducer" if self.config.use_transducer else "ctc"

    def encode_offline(self, features: torch.Tensor, lengths: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """features (B, T, F), lengths (B,) -> hidden (B, T', C), hidden_lens (B,)."""
        return self.encoder(features, lengths)

    def ctc_log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        if not self.config.use_ctc:
            raise ValueError("this Zipformer checkpoint has no CTC head (ctc_output); decode "
                             "with the transducer family")
        return self.ctc(hidden).float().log_softmax(dim=-1)

    def forward_offline(self, features: torch.Tensor, lengths: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, lens = self.encode_offline(features, lengths)
        return self.ctc_log_probs(hidden), lens
