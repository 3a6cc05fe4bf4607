"""Qwen2-Audio checkpoint converter: transformers' ``Qwen2AudioForConditionalGeneration``.

Both key layouts are read: the Hub's (``audio_tower.*``, ``multi_modal_projector.*``,
``language_model.model.*``, ``language_model.lm_head.*``: what ``save_pretrained`` writes)
and transformers 5's in-memory one (``model.audio_tower.*``, ``model.language_model.*``,
``lm_head.*``). The prompt's ids come from the checkpoint's config and tokenizer; the prompt
layout from its chat template (``chat_template.jinja``, ``chat_template.json`` or
``tokenizer_config.json``'s, as transformers' processor saves it) rendered for one user turn of
the audio then the instruction, as transformers' ``apply_chat_template`` renders it
(``add_generation_prompt=True``); ``generation_config.json``'s ``max_new_tokens`` becomes the
``llm`` family's default cap and its ``eos_token_id`` the stop ids.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from oasr.features.spec import FeatureConfig
from oasr.models.converter import (
    BaseCheckpointConverter,
    MappedWeights,
    has_hf_weights,
    load_hf_weights,
    read_json,
    whisper_logmel_features,
)
from oasr.models.qwen2_audio.config import Qwen2AudioConfig
from oasr.models.weight_map import Rule, WeightMap
from oasr.tokenizers.base import TokenizerSpec

__all__ = ["HfQwen2AudioConverter", "map_key"]

# Upstream prefix -> ours; the first match wins (longest prefixes first).
_PREFIXES = (
    ("model.audio_tower.", "encoder."),
    ("model.multi_modal_projector.", "multi_modal_projector."),
    ("model.language_model.", "decoder."),
    ("language_model.model.", "decoder."),
    ("language_model.lm_head.", "decoder.lm_head."),
    ("audio_tower.", "encoder."),
    ("multi_modal_projector.", "multi_modal_projector."),
    ("lm_head.", "decoder.lm_head."),
)
# Stands for the instruction while the chat template renders (no template writes it itself).
_INSTRUCTION_MARK = "\x00instruction\x00"
# The ChatML and audio markers the prompt is assembled from.
_REQUIRED_TOKENS = ("<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|audio_eos|>")


_KEYS = WeightMap(*(Rule(re.escape(src) + "(.*)", dst + r"\1") for src, dst in _PREFIXES))
_LM_HEAD = "decoder.lm_head.weight"


def map_key(name: str) -> str | None:
    found = _KEYS.target(name)
    return None if found is None else found[1]


# With tied embeddings, every upstream spelling of the output head is dropped.
_TIED_HEAD = WeightMap(*(
    Rule(re.escape(name), reason="tied to decoder.embed_tokens.weight")
    for name in (src + _LM_HEAD[len(dst):] for src, dst in _PREFIXES if _LM_HEAD.startswith(dst))
    if map_key(name) == _LM_HEAD))


def _special_tokens(folder: Path) -> dict[str, int]:
    data = read_json(folder / "tokenizer.json") or {}
    return {t["content"]: int(t["id"]) for t in data.get("added_tokens") or []}


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]


def _has_lm_head(folder: Path) -> bool:
    index = read_json(folder / "model.safetensors.index.json")
    if index:
        names: Any = index.get("weight_map") or {}
    elif (folder / "model.safetensors").is_file():
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            names = list(f.keys())
    else:
        names = load_hf_weights(folder)
    return any(map_key(n) == "decoder.lm_head.weight" for n in names)


def _chat_template(folder: Path) -> str | None:
    """The checkpoint's Jinja chat template, where its processor or tokenizer saved one."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for name in ("chat_template.json", "processor_config.json", "tokenizer_config.json"):
        template = (read_json(folder / name) or {}).get("chat_template")
        if isinstance(template, str):
            return template
    return None


def render_chat_template(template: str, folder: Path) -> str:
    """One user turn (the audio, then the instruction) rendered as transformers'
    ``apply_chat_template(..., add_generation_prompt=True)`` renders it, with ``{instruction}``
    where the instruction goes."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def refuse(message: str) -> None:
        raise ValueError(f"{folder}: the chat template raised: {message}")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = refuse
    messages = [{"role": "user", "content": [
        {"type": "audio", "audio_url": "audio"},
        {"type": "text", "text": _INSTRUCTION_MARK}]}]
    text = env.from_string(template).render(messages=messages, add_generation_prompt=True)
    if text.count(_INSTRUCTION_MARK) != 1 or text.count("<|AUDIO|>") != 1:
        raise ValueError(f"{folder}: the chat template does not render one audio turn with "
                         "its text (one <|AUDIO|> and the instruction once); the llm family "
                         "needs that layout")
    return text.replace(_INSTRUCTION_MARK, "{instruction}")


class HfQwen2AudioConverter(BaseCheckpointConverter):
    architecture = "qwen2_audio"
    source_format = "hf"
    default_checkpoint_name = "model.safetensors"
    detect_specificity = 10
    config_class = "oasr.models.qwen2_audio.config:Qwen2AudioConfig"
    looks_for = ("config.json with model_type 'qwen2_audio' beside model.safetensors"
                 "[.index.json] and tokenizer.json")

    def detect(self, path: Path) -> bool:
        cfg = read_json(Path(path) / "config.json")
        return bool(cfg) and cfg.get("model_type") == "qwen2_audio" and has_hf_weights(Path(path))

    def build_config(self, path: Path) -> Qwen2AudioConfig:
        path = Path(path)
        cfg = read_json(path / "config.json")
        if not cfg or cfg.get("model_type") != "qwen2_audio":
            raise ValueError(f"{path}/config.json is not a Qwen2-Audio config "
                             "(model_type 'qwen2_audio')")
        audio, text = cfg.get("audio_config") or {}, cfg.get("text_config") or {}
        if audio.get("activation_function", "gelu") != "gelu":
            raise ValueError(f"{path}: audio activation {audio['activation_function']!r} is not "
                             "supported (Qwen2-Audio uses 'gelu')")
        if audio.get("scale_embedding", False):
            raise ValueError(f"{path}: scale_embedding=True is not supported")
        if text.get("hidden_act", "silu") != "silu":
            raise ValueError(f"{path}: LM activation {text['hidden_act']!r} is not supported "
                             "(Qwen2 uses 'silu')")
        if text.get("use_sliding_window", False):
            raise ValueError(f"{path}: sliding-window attention is not supported")
        rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise ValueError(f"{path}: rope type {rope.get('rope_type')!r} is not supported")
        theta = rope.get("rope_theta", text.get("rope_theta", 10000.0))
        specials = _special_tokens(path)
        missing = [t for t in _REQUIRED_TOKENS if t not in specials]
        if missing:
            raise ValueError(f"{path}/tokenizer.json lacks the ChatML / audio tokens {missing}")
        gen = read_json(path / "generation_config.json") or {}
        eos = _ids(gen.get("eos_token_id")) or _ids(text.get("eos_token_id"))
        for tok in ("<|im_end|>", "<|endoftext|>"):
            if tok in specials and specials[tok] not in eos:
                eos.append(specials[tok])
        pad = gen.get("pad_token_id", text.get("pad_token_id"))
        if pad is None:
            pad = specials.get("<|endoftext|>", eos[0])
        heads = int(text["num_attention_heads"])
        template = _chat_template(path)
        prompt = {} if template is None else {"chat_template": render_chat_template(template,
                                                                                    path)}
        config = Qwen2AudioConfig(
            n_mels=int(audio.get("num_mel_bins", 128)),
            audio_d_model=int(audio.get("d_model", 1280)),
            audio_layers=int(audio.get("encoder_layers", 32)),
            audio_heads=int(audio.get("encoder_attention_heads", 20)),
            audio_ffn_dim=int(audio.get("encoder_ffn_dim", 5120)),
            max_source_positions=int(audio.get("max_source_positions", 1500)),
            vocab_size=int(text["vocab_size"]),
            hidden_size=int(text["hidden_size"]),
            intermediate_size=int(text["intermediate_size"]),
            num_hidden_layers=int(text["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(text.get("num_key_value_heads") or heads),
            rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            max_position_embeddings=int(text.get("max_position_embeddings", 32768)),
            # The head is the checkpoint's own lm_head weight wherever it holds one: transformers
            # 5.25 never ties Qwen2-Audio's head (no tied-weight keys), whatever either
            # tie_word_embeddings flag says; a checkpoint without one is read tied.
            tie_word_embeddings=not _has_lm_head(path),
            audio_token_id=int(cfg.get("audio_token_index", cfg.get("audio_token_id", 151646))),
            eos_token_ids=eos,
            pad_token_id=int(pad),
            **prompt,
        )
        config.validate()
        return config

    def expected_shapes(self, config: Qwen2AudioConfig) -> dict[str, tuple[int, ...]]:
        from oasr.models.qwen2_audio.model import parameter_shapes

        return parameter_shapes(config)

    def map_weights(self, path: Path, config: Qwen2AudioConfig) -> MappedWeights:
        raw = load_hf_weights(path)
        expected = self.expected_shapes(config)
        keys = _TIED_HEAD + _KEYS if config.tie_word_embeddings else _KEYS
        out, unmatched = keys.apply(raw, only=expected)
        for name in unmatched:
            out.drop(name, "not a Qwen2-Audio inference weight")
        return out

    def build_decoding_defaults(self, config: Qwen2AudioConfig, path: Path) -> dict[str, Any]:
        gen = read_json(Path(path) / "generation_config.json") or {}
        cap = gen.get("max_new_tokens")
        return {} if cap is None else {"max_new_tokens": int(cap)}

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        if not (Path(path) / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{path} has no tokenizer.json (Qwen's tokenizer)")
        return TokenizerSpec(kind="huggingface", files={"tokenizer_json": "tokenizer.json"})

    def build_feature_config(self, config: Qwen2AudioConfig) -> FeatureConfig:
        return whisper_logmel_features(config.n_mels)
