"""Nemotron streaming RNN-T: the cache-aware encoder under Parakeet's LSTM transducer head.

Offline it is a ``FastConformerRnnt`` whose encoder applies the chunked-limited mask; the
streaming surface (``init_stream_cache`` / ``encode_chunk``) encodes one chunk of features
against a per-stream ``EncoderCache``, and the ``transducer`` family's greedy search runs over
the frames as they come.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.models.fastconformer.transducer import FastConformerRnnt
from oasr.models.nemotron_streaming.config import NemotronStreamingConfig
from oasr.models.nemotron_streaming.encoder import EncoderCache, NemotronStreamingEncoder

__all__ = ["NemotronStreamingRnnt"]


class NemotronStreamingRnnt(FastConformerRnnt):
    encoder: NemotronStreamingEncoder
    config: NemotronStreamingConfig
    encoder_cls = NemotronStreamingEncoder
    config_cls = NemotronStreamingConfig

    def __init__(self, cfg: NemotronStreamingConfig) -> None:
        if not isinstance(cfg, NemotronStreamingConfig):
            raise TypeError(f"NemotronStreamingRnnt needs a NemotronStreamingConfig, got "
                            f"{type(cfg).__name__}")
        super().__init__(cfg)

    def encoder_options(self) -> dict[str, Any]:
        """The attention context the encoder runs with. These checkpoints carry no prompt or
        language conditioning, so a ``language`` request is refused at admission by the
        ``transducer`` family (it acts on no selective option)."""
        cfg = self.config
        return {"lookahead": cfg.lookahead, "left_context": cfg.left_context,
                "lookaheads": list(cfg.lookaheads)}

    def encode_offline(self, features: torch.Tensor, lengths: torch.Tensor,
                       lookahead: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder(features, lengths, lookahead)

    def init_stream_cache(self, batch: int = 1) -> EncoderCache:
        p = next(self.parameters())
        return self.encoder.init_cache(batch, p.device, p.dtype)

    def encode_chunk(self, features: torch.Tensor, cache: EncoderCache,
                     lookahead: int | None = None) -> tuple[torch.Tensor, EncoderCache]:
        return self.encoder.forward_chunk(features, cache, lookahead)
