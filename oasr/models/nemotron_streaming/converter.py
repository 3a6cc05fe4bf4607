"""transformers' ``NemotronAsrStreamingForRNNT`` folders -> ``nemotron_streaming``.

``config.json`` (``model_type: nemotron_asr_streaming``) + ``model.safetensors``. The block and
transducer names are Parakeet's (``oasr.models.fastconformer.converters``); the subsampling is
``conv_in`` + ``layers.N.{depthwise,pointwise}_conv``; ``sliding_window - 1`` is the cached
left context and ``default_num_lookahead_tokens`` the default right context. The features are
Parakeet's log-mel without normalisation (``preprocessor_config.json``).

``HfNemotronPromptedConverter``: transformers' ``Nemotron3_5AsrForRNNT`` (``model_type:
nemotron3_5_asr``), the same encoder and head plus the language prompt (``prompt_projector.
linear_{1,2}``; ``num_prompts``, ``prompt_intermediate_size``, ``default_prompt_id`` from
``config.json``, the language -> slot table from ``processor_config.json``'s
``prompt_dictionary``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from oasr.features.spec import FeatureConfig
from oasr.models.converter import MappedWeights, load_hf_weights, read_json
from oasr.models.fastconformer import converters as parakeet
from oasr.models.nemotron_streaming.config import NemotronStreamingConfig
from oasr.models.weight_map import Rule, WeightMap, keep_unmatched

__all__ = ["HfNemotronPromptedConverter", "HfNemotronStreamingConverter"]

_PROMPT = Rule(r"prompt_projector\.linear_[12]\.(weight|bias)", r"\g<0>")


def _subsampling_renames(config: NemotronStreamingConfig) -> tuple[Rule, ...]:
    """``conv_in`` is our first conv; stage N's (depthwise, pointwise) convs follow it."""
    stages = (
        Rule(rf"encoder\.subsampling\.layers\.{n}\.{kind}_conv\.(weight|bias)",
             rf"encoder.subsampling.convs.{1 + 2 * n + pointwise}.\1")
        for n in range(config.subsampling_stages - 1)
        for pointwise, kind in enumerate(("depthwise", "pointwise")))
    return (Rule(r"encoder\.subsampling\.conv_in\.(?:.*\.)?([^.]*)",
                 r"encoder.subsampling.convs.0.\1"), *stages)


class HfNemotronStreamingConverter(parakeet.HfParakeetRnntConverter):
    architecture = "nemotron_streaming"
    config_class = "oasr.models.nemotron_streaming.config:NemotronStreamingConfig"
    model_type = "nemotron_asr_streaming"

    @property
    def looks_for(self) -> str:  # type: ignore[override]
        return f"config.json with model_type '{self.model_type}' beside model.safetensors"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_dir() or not parakeet.has_hf_weights(path):
            return False
        cfg = read_json(path / "config.json")
        return bool(cfg) and cfg.get("model_type") == self.model_type

    def build_config(self, path: Path) -> NemotronStreamingConfig:
        path = Path(path)
        cfg = read_json(path / "config.json")
        if not cfg or cfg.get("model_type") != self.model_type:
            raise ValueError(f"{path}/config.json is not a transformers {self.model_type} "
                             "config")
        enc = dict(cfg.get("encoder_config") or {})
        if int(enc.get("subsampling_conv_stride", 2)) != 2:
            raise ValueError(f"{path}/config.json: encoder_config.subsampling_conv_stride="
                             f"{enc['subsampling_conv_stride']} (only 2 is implemented)")
        vocab = int(cfg.get("vocab_size", 1025))
        # the trained right contexts live on the processor (transformers' default otherwise)
        proc = read_json(path / "processor_config.json") or {}
        lookaheads = proc.get("supported_num_lookahead_tokens") or [13, 6, 1, 0]
        default = int(enc.get("default_num_lookahead_tokens", lookaheads[0]))
        if default not in lookaheads:
            lookaheads = [default, *lookaheads]
        return NemotronStreamingConfig(
            **parakeet.hf_config_fields(cfg), head="rnnt",
            blank_id=int(cfg.get("blank_token_id", vocab - 1)),
            left_context=int(enc.get("sliding_window", 71)) - 1,
            lookahead=default,
            lookaheads=tuple(int(r) for r in lookaheads),
            **self.prompt_fields(cfg, proc),
        )

    def prompt_fields(self, cfg: dict[str, Any], proc: dict[str, Any]) -> dict[str, Any]:
        return {}

    def expected_shapes(self, config: NemotronStreamingConfig) -> dict[str, tuple[int, ...]]:
        from oasr.models.nemotron_streaming.model import NemotronStreamingRnnt

        with torch.device("meta"):
            model = NemotronStreamingRnnt(config)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}

    def map_weights(self, path: Path, config: NemotronStreamingConfig) -> MappedWeights:
        raw = load_hf_weights(path)
        rules = (WeightMap(parakeet.INV_FREQ, *_subsampling_renames(config), _PROMPT)
                 + parakeet.hf_renames({}, "rnnt"))
        return keep_unmatched(raw, *rules.apply(raw))

    def build_feature_config(self, config: NemotronStreamingConfig) -> FeatureConfig:
        feats = parakeet.parakeet_logmel_features(config.num_mel_bins,
                                                  getattr(self, "_pre", None))
        params: dict[str, Any] = dict(feats.params)
        params["normalize"] = "none"
        return dataclasses.replace(feats, params=params)


class HfNemotronPromptedConverter(HfNemotronStreamingConverter):
    model_type = "nemotron3_5_asr"

    def prompt_fields(self, cfg: dict[str, Any], proc: dict[str, Any]) -> dict[str, Any]:
        return dict(num_prompts=int(cfg.get("num_prompts", 128)),
                    prompt_hidden=int(cfg.get("prompt_intermediate_size", 2048)),
                    default_prompt_id=int(cfg.get("default_prompt_id", 101)),
                    prompt_dictionary=dict(proc.get("prompt_dictionary") or {}))
