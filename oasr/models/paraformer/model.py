"""Paraformer (FunASR): SAN-M encoder, CIF predictor, non-autoregressive decoder.

The surface the ``paraformer`` family drives:

* ``encode_offline(features, lengths) -> (hidden, hidden_lens)``: LFR-stacked fbank in (the
  engine stacks, ``FeatureConfig.lfr_m / lfr_n``); ``am.mvn``'s ``(x + shift) * scale`` is
  applied here, then the encoder.
* ``predict(hidden, hidden_lens) -> CifOutput``: acoustic embeddings, token counts, alphas and
  the frames where each token fired.
* ``nar_decode(cif, hidden, hidden_lens) -> logits (B, K, V)``: one decoder pass.
"""

from __future__ import annotations

import torch

from oasr.models.base import BaseAsrModel
from oasr.models.paraformer.config import ParaformerConfig
from oasr.models.paraformer.decoder import ParaformerDecoder
from oasr.models.paraformer.encoder import SanmEncoder
from oasr.models.paraformer.predictor import CifOutput, CifPredictor

__all__ = ["ParaformerModel"]


class ParaformerModel(BaseAsrModel):
    """FunASR Paraformer for the one-shot ``paraformer`` family."""

    decode_families = ("paraformer",)
    encoder: SanmEncoder
    decoder: ParaformerDecoder  # type: ignore[assignment]  # NAR, not the incremental surface
    config: ParaformerConfig

    def __init__(self, cfg: ParaformerConfig) -> None:
        super().__init__()
        self.config = cfg
        # am.mvn: identity until the converter loads the checkpoint's.
        self.register_buffer("cmvn_shift", torch.zeros(cfg.input_dim))
        self.register_buffer("cmvn_scale", torch.ones(cfg.input_dim))
        self.encoder = SanmEncoder(cfg)
        self.predictor = CifPredictor(cfg)
        self.decoder = ParaformerDecoder(cfg)

    def encode_offline(self, features: torch.Tensor,
                       lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features (B, T, input_dim) LFR-stacked fbank, lengths (B,) -> hidden (B, T, C),
        hidden_lens (B,). Frames at or past a row's length hold no meaning."""
        x = (features + self.cmvn_shift.to(features.dtype)) * self.cmvn_scale.to(features.dtype)
        return self.encoder(x, lengths)

    def predict(self, hidden: torch.Tensor, hidden_lens: torch.Tensor) -> CifOutput:
        """The CIF predictor over the encoder output (``CifOutput``)."""
        return self.predictor(hidden, hidden_lens.to(hidden.device))

    def nar_decode(self, cif: CifOutput, hidden: torch.Tensor,
                   hidden_lens: torch.Tensor) -> torch.Tensor:
        """One decoder pass: logits (B, K, V) float32; rows past ``cif.token_lens`` are
        meaningless."""
        return self.decoder(cif.embeds, cif.token_lens, hidden,
                            hidden_lens.to(hidden.device)).float()

    def transcribe_ids(self, features: torch.Tensor,
                       lengths: torch.Tensor) -> tuple[list[list[int]], CifOutput]:
        """Greedy one-shot ids per row (blank / sos / eos dropped) and the CIF output."""
        hidden, lens = self.encode_offline(features, lengths)
        cif = self.predict(hidden, lens)
        ids = self.nar_decode(cif, hidden, lens).argmax(-1).cpu()
        drop = {self.config.blank_id, self.config.sos_id, self.config.eos_id}
        n = cif.token_lens.cpu().tolist()
        return [[t for t in row[:k] if t not in drop] for row, k in zip(ids.tolist(), n)], cif
