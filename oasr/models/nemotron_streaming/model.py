"""Nemotron streaming RNN-T: the cache-aware encoder under Parakeet's LSTM transducer head.

Offline it is a ``FastConformerRnnt`` whose encoder applies the chunked-limited mask; the
streaming surface (``init_stream_cache`` / ``encode_chunk``) encodes one chunk of features
against a per-stream ``EncoderCache``, and the ``transducer`` family's greedy search runs over
the frames as they come.

A prompted checkpoint (``config.num_prompts > 0``) conditions every frame on a target language
(``apply_prompt``) between the encoder and the joint; its ``encoder_options()`` then carries
``language``, which is what lets the ``transducer`` family admit a request's language (and the
chunk-wise policy a stream's). Without prompts a language is refused at admission.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.models.fastconformer.transducer import FastConformerRnnt
from oasr.models.nemotron_streaming.config import NemotronStreamingConfig
from oasr.models.nemotron_streaming.encoder import EncoderCache, NemotronStreamingEncoder
from oasr.models.nemotron_streaming.prompt import PromptProjector

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
        self.prompt_projector = (PromptProjector(cfg.d_model, cfg.num_prompts, cfg.prompt_hidden)
                                 if cfg.num_prompts else None)

    def encoder_options(self) -> dict[str, Any]:
        """The attention context the encoder runs with and, on a prompted checkpoint,
        ``language``: the slot used when none is asked and the languages it knows."""
        cfg = self.config
        out: dict[str, Any] = {"lookahead": cfg.lookahead, "left_context": cfg.left_context,
                               "lookaheads": list(cfg.lookaheads)}
        if self.prompt_projector is not None:
            out["language"] = {"default_prompt_id": cfg.default_prompt_id,
                               "languages": sorted(cfg.prompt_dictionary)}
        return out

    def prompt_slots(self, languages: list[str | None]) -> torch.Tensor:
        """(B,) prompt slots for per-row target languages (``None``: the default slot).

        Raises:
            ValueError: this checkpoint has no prompt, or a language is not in its dictionary.
        """
        cfg = self.config
        if self.prompt_projector is None:
            asked = sorted({x for x in languages if x is not None})
            raise ValueError(f"language {asked}: this checkpoint has no language prompt")
        unknown = sorted({x for x in languages if x is not None and x not in
                          cfg.prompt_dictionary})
        if unknown:
            known = ", ".join(sorted(cfg.prompt_dictionary)) or "none: the checkpoint's " \
                "processor_config.json has no prompt_dictionary"
            raise ValueError(f"language {unknown} is not in this checkpoint's prompt "
                             f"dictionary (known: {known})")
        return torch.tensor([cfg.default_prompt_id if x is None else cfg.prompt_dictionary[x]
                             for x in languages], dtype=torch.int64)

    def apply_prompt(self, hidden: torch.Tensor, languages: list[str | None]) -> torch.Tensor:
        """hidden (B, T, C) encoder frames -> the frames the joint reads: conditioned on each
        row's language on a prompted checkpoint, unchanged otherwise."""
        if self.prompt_projector is None:
            if any(x is not None for x in languages):
                self.prompt_slots(languages)  # raises, naming the language
            return hidden
        return self.prompt_projector(hidden, self.prompt_slots(languages))

    def encode_offline(self, features: torch.Tensor, lengths: torch.Tensor,
                       lookahead: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder(features, lengths, lookahead)

    def init_stream_cache(self, batch: int = 1) -> EncoderCache:
        p = next(self.parameters())
        return self.encoder.init_cache(batch, p.device, p.dtype)

    def encode_chunk(self, features: torch.Tensor, cache: EncoderCache,
                     lookahead: int | None = None) -> tuple[torch.Tensor, EncoderCache]:
        return self.encoder.forward_chunk(features, cache, lookahead)
