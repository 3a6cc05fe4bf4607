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
from oasr.models.zipformer.streaming import LOG_EPS

__all__ = ["ZipformerModel", "pad_tail"]


def pad_tail(features: torch.Tensor, lengths: torch.Tensor, frames: int, value: float
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``frames`` frames of ``value`` after each row's ``lengths`` valid ones:
    (B, T, F), (B,) -> (B, T + frames, F), lengths + frames."""
    b, t, f = features.shape
    out = features.new_full((b, t + frames, f), value)
    lengths = lengths.to(features.device)
    valid = torch.arange(t, device=features.device).unsqueeze(0) < lengths.unsqueeze(1)
    out[:, :t] = torch.where(valid.unsqueeze(-1), features, out[:, :t])
    return out, lengths + frames


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

    def configure_chunks(self, chunk_size: int | None = None,
                         left_context_frames: int | None = None) -> None:
        """``-d chunk_size`` / ``-d left_context_frames``: ``ZipformerEncoder.configure_chunks``."""
        self.encoder.configure_chunks(chunk_size, left_context_frames)

    def encode_offline(self, features: torch.Tensor, lengths: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """features (B, T, F), lengths (B,) -> hidden (B, T', C), hidden_lens (B,). A causal
        checkpoint decodes as icefall's decode.py does: ``decode_tail_pad_frames`` frames of
        log(1e-10) after each row, then the chunk mask."""
        pad = self.config.decode_tail_pad_frames if self.config.causal else 0
        if pad:
            features, lengths = pad_tail(features, lengths, pad, LOG_EPS)
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
