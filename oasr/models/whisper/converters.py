"""Whisper checkpoint converters: Hugging Face (transformers) and CTranslate2 (faster-whisper).

Both map onto ``WhisperConfig.parameter_shapes`` names. The decoding metadata comes from the
checkpoint's own files (generation_config.json / config.json and the tokenizer's special
tokens), never from a table of known releases.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from oasr.features.spec import FeatureConfig
from oasr.models.converter import (
    BaseCheckpointConverter,
    MappedWeights,
    has_hf_weights,
    load_hf_weights,
    read_json,
    whisper_logmel_features,
)
from oasr.models.weight_map import Rule, WeightMap, renames
from oasr.models.whisper.config import WhisperConfig
from oasr.models.whisper.ct2_format import load_ct2, read_ct2_header, read_spec_name
from oasr.tokenizers.base import TokenizerSpec

__all__ = ["HfWhisperConverter", "Ct2WhisperConverter", "whisper_special_tokens"]

# openai/whisper's rule: the multilingual vocabulary has 51865 entries or more.
MULTILINGUAL_MIN_VOCAB = 51865
_NON_LANGUAGE = {
    "endoftext", "startoftranscript", "translate", "transcribe", "startoflm", "startofprev",
    "nocaptions", "nospeech", "notimestamps",
}
_LANGUAGE_TOKEN = re.compile(r"^<\|([a-z]{2,3})\|>$")
_TIED = "tied to decoder.embed_tokens.weight"
# transformers' names with ``model.`` stripped are ours; the output projection is the
# embedding (tied; checked equal before it is dropped).
_HF_KEYS = WeightMap(Rule(r"(?:model\.)?proj_out\.weight", reason=_TIED),
                     Rule(r"(?:model\.)?(.+)", r"\1"))

# Tokenizer roles -> file names, copied into the bundle when present.
# (The roles are the tokenizer kind's own: oasr.tokenizers.huggingface.FILE_ROLES.)
_HF_TOKENIZER_FILES = {
    "tokenizer_json": "tokenizer.json",
    "vocab_json": "vocab.json",
    "merges_txt": "merges.txt",
    "added_tokens_json": "added_tokens.json",
}
_CT2_TOKENIZER_FILES = {"tokenizer_json": "tokenizer.json"}


# -- special tokens ---------------------------------------------------------------------------
def whisper_special_tokens(folder: Path) -> dict[str, int]:
    """The ``<|...|>`` tokens of a Whisper tokenizer: token text -> id.

    Read from tokenizer.json's added tokens, else added_tokens.json, else a CTranslate2
    vocabulary.txt (one token per line, line number = id).
    """
    data = read_json(folder / "tokenizer.json")
    if data and isinstance(data.get("added_tokens"), list):
        return {t["content"]: int(t["id"]) for t in data["added_tokens"]
                if str(t.get("content", "")).startswith("<|")}
    added = read_json(folder / "added_tokens.json")
    if added:
        return {k: int(v) for k, v in added.items() if k.startswith("<|")}
    vocab = folder / "vocabulary.txt"
    if vocab.is_file():
        lines = vocab.read_text(encoding="utf-8").split("\n")
        return {t: i for i, t in enumerate(lines) if t.startswith("<|") and t.endswith("|>")}
    return {}


def _language_ids(specials: dict[str, int]) -> dict[str, int]:
    out = {}
    for tok, i in specials.items():
        m = _LANGUAGE_TOKEN.match(tok)
        if m and m.group(1) not in _NON_LANGUAGE:
            out[m.group(1)] = i
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def _task_ids(specials: dict[str, int]) -> dict[str, int]:
    return {t: specials[f"<|{t}|>"] for t in ("transcribe", "translate") if f"<|{t}|>" in specials}


def _code(lang_token: str) -> str:
    if lang_token.startswith("<|") and lang_token.endswith("|>"):
        return lang_token[2:-2]
    return lang_token


def build_sot_sequence(
    sot: int,
    forced: list[list[Any]] | None,
    is_multilingual: bool,
    lang_to_id: dict[str, int],
    task_to_id: dict[str, int],
    no_timestamps: int,
) -> list[int]:
    """The default prompt from ``forced_decoder_ids`` (positions 1..n after SOT).

    A null language slot (large-v2/v3: HF detects the language at generate time) is filled
    with ``<|en|>``; a multilingual prompt without a task gets ``<|transcribe|>``; and
    ``<|notimestamps|>`` is appended when absent, since we decode without timestamp tokens.
    """
    seq = [sot]
    if forced:
        pairs = sorted((int(p), t) for p, t in forced)
        if [p for p, _ in pairs] != list(range(1, len(pairs) + 1)):
            raise ValueError(f"forced_decoder_ids positions are not 1..n: {forced}")
        for _, tok in pairs:
            if tok is None:
                if not (is_multilingual and "en" in lang_to_id):
                    raise ValueError("forced_decoder_ids has a null slot but the checkpoint "
                                     "has no <|en|> token to fill it with")
                tok = lang_to_id["en"]
            seq.append(int(tok))
    elif is_multilingual:
        if "en" not in lang_to_id:
            raise ValueError("a multilingual Whisper checkpoint without an <|en|> token")
        seq.append(lang_to_id["en"])
    if is_multilingual and not set(seq) & set(task_to_id.values()):
        if "transcribe" not in task_to_id:
            raise ValueError("a multilingual Whisper checkpoint without a <|transcribe|> token")
        seq.append(task_to_id["transcribe"])
    if no_timestamps not in seq:
        seq.append(no_timestamps)
    return seq


def _require(specials: dict[str, int], token: str, folder: Path) -> int:
    if token not in specials:
        raise ValueError(f"{folder}: the tokenizer has no {token} token; is this a Whisper "
                         "tokenizer? (looked in tokenizer.json, added_tokens.json, vocabulary.txt)")
    return specials[token]


def _tokenizer_spec(folder: Path, roles: dict[str, str], specials: dict[str, int]) -> TokenizerSpec:
    files = {role: name for role, name in roles.items() if (folder / name).is_file()}
    if "tokenizer_json" in files:
        files = {"tokenizer_json": files["tokenizer_json"]}
    elif not {"vocab_json", "merges_txt"} <= set(files):
        raise FileNotFoundError(
            f"{folder} has no Whisper tokenizer: need tokenizer.json (or vocab.json + merges.txt)"
        )
    # The tokenizer reads its special and timestamp ids from its own vocabulary; checking
    # them here refuses a folder whose tokenizer is not Whisper's.
    _require(specials, "<|endoftext|>", folder)
    _require(specials, "<|notimestamps|>", folder)
    return TokenizerSpec(kind="whisper", files=files)


class _WhisperConverter(BaseCheckpointConverter):
    architecture = "whisper"
    config_class = "oasr.models.whisper.config:WhisperConfig"

    def expected_shapes(self, config: WhisperConfig) -> dict[str, tuple[int, ...]]:
        return config.parameter_shapes()

    def build_feature_config(self, config: WhisperConfig) -> FeatureConfig:
        return whisper_logmel_features(config.n_mels)


# -- Hugging Face -----------------------------------------------------------------------------
class HfWhisperConverter(_WhisperConverter):
    """transformers' ``WhisperForConditionalGeneration`` folders (``save_pretrained`` layout)."""

    source_format = "hf"
    default_checkpoint_name = "model.safetensors"
    detect_specificity = 10
    looks_for = ("config.json with model_type 'whisper' beside model.safetensors[.index.json] "
                 "or pytorch_model.bin")

    def detect(self, path: Path) -> bool:
        path = Path(path)
        cfg = read_json(path / "config.json")
        return bool(cfg) and cfg.get("model_type") == "whisper" and has_hf_weights(path)

    def build_config(self, path: Path) -> WhisperConfig:
        path = Path(path)
        cfg = read_json(path / "config.json")
        if not cfg or cfg.get("model_type") != "whisper":
            raise ValueError(f"{path}/config.json is not a Whisper config (model_type 'whisper')")
        act = cfg.get("activation_function", "gelu")
        if act != "gelu":
            raise ValueError(f"{path}: activation_function {act!r} is not supported (Whisper "
                             "uses 'gelu')")
        if cfg.get("scale_embedding", False):
            raise ValueError(f"{path}: scale_embedding=True is not supported by our Whisper")
        gen = read_json(path / "generation_config.json") or {}
        specials = whisper_special_tokens(path)

        def pick(name: str) -> Any:
            value = gen.get(name, cfg.get(name))
            return value[0] if isinstance(value, list) else value

        vocab_size = int(cfg["vocab_size"])
        is_multilingual = bool(gen.get("is_multilingual", vocab_size >= MULTILINGUAL_MIN_VOCAB))
        if not is_multilingual:
            lang_to_id: dict[str, int] = {}
        elif gen.get("lang_to_id"):
            lang_to_id = {_code(k): int(v) for k, v in gen["lang_to_id"].items()}
        else:
            lang_to_id = _language_ids(specials)
        task_to_id = {k: int(v) for k, v in (gen.get("task_to_id") or _task_ids(specials)).items()}
        sot = pick("decoder_start_token_id")
        if sot is None:
            sot = _require(specials, "<|startoftranscript|>", path)
        eos = pick("eos_token_id")
        if eos is None:
            eos = _require(specials, "<|endoftext|>", path)
        pad = pick("pad_token_id")
        no_ts = gen.get("no_timestamps_token_id") or _require(specials, "<|notimestamps|>", path)
        forced = gen.get("forced_decoder_ids", cfg.get("forced_decoder_ids"))
        config = WhisperConfig(
            n_mels=int(cfg["num_mel_bins"]),
            vocab_size=vocab_size,
            d_model=int(cfg["d_model"]),
            encoder_layers=int(cfg["encoder_layers"]),
            encoder_attention_heads=int(cfg["encoder_attention_heads"]),
            decoder_layers=int(cfg["decoder_layers"]),
            decoder_attention_heads=int(cfg["decoder_attention_heads"]),
            encoder_ffn_dim=int(cfg["encoder_ffn_dim"]),
            decoder_ffn_dim=int(cfg["decoder_ffn_dim"]),
            max_source_positions=int(cfg.get("max_source_positions", 1500)),
            max_target_positions=int(cfg.get("max_target_positions", 448)),
            decoder_start_token_id=int(sot),
            eos_token_id=int(eos),
            pad_token_id=int(eos if pad is None else pad),
            no_timestamps_token_id=int(no_ts),
            sot_sequence=build_sot_sequence(
                int(sot), forced, is_multilingual, lang_to_id, task_to_id, int(no_ts)
            ),
            suppress_tokens=[int(t) for t in (_pick_list(gen, cfg, "suppress_tokens"))],
            begin_suppress_tokens=[int(t) for t in _pick_list(gen, cfg, "begin_suppress_tokens")],
            alignment_heads=[[int(a), int(b)] for a, b in gen.get("alignment_heads") or []],
            lang_to_id=lang_to_id,
            task_to_id=task_to_id,
            is_multilingual=is_multilingual,
        )
        config.validate()
        return config

    def map_weights(self, path: Path, config: WhisperConfig) -> MappedWeights:
        raw = load_hf_weights(path)
        expected = config.parameter_shapes()
        emb = raw.get("model.decoder.embed_tokens.weight", raw.get("decoder.embed_tokens.weight"))
        for name in ("proj_out.weight", "model.proj_out.weight"):
            if name in raw:
                _check_tied(raw[name], emb, name)
        out, unmatched = _HF_KEYS.apply(raw, only=expected)
        for name in unmatched:
            out.drop(name, "not a Whisper inference weight")
        return out

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        path = Path(path)
        return _tokenizer_spec(path, _HF_TOKENIZER_FILES, whisper_special_tokens(path))


def _pick_list(gen: dict[str, Any], cfg: dict[str, Any], name: str) -> list[Any]:
    value = gen.get(name)
    if value is None:
        value = cfg.get(name)
    return list(value or [])


def _check_tied(proj: torch.Tensor, emb: torch.Tensor | None, name: str) -> None:
    if emb is not None and (proj.shape != emb.shape or not torch.equal(proj, emb)):
        raise ValueError(
            f"{name} differs from the token embedding; our Whisper ties the output projection "
            "to decoder.embed_tokens.weight, so an untied checkpoint is not supported"
        )


# -- CTranslate2 ------------------------------------------------------------------------------
# Per-layer CTranslate2 suffix -> our suffix, for both stacks.
_CT2_LAYER = {
    "self_attention/layer_norm/gamma": "self_attn_layer_norm.weight",
    "self_attention/layer_norm/beta": "self_attn_layer_norm.bias",
    "self_attention/linear_1/weight": "self_attn.out_proj.weight",
    "self_attention/linear_1/bias": "self_attn.out_proj.bias",
    "ffn/layer_norm/gamma": "final_layer_norm.weight",
    "ffn/layer_norm/beta": "final_layer_norm.bias",
    "ffn/linear_0/weight": "fc1.weight",
    "ffn/linear_0/bias": "fc1.bias",
    "ffn/linear_1/weight": "fc2.weight",
    "ffn/linear_1/bias": "fc2.bias",
}
# Decoder layers add cross-attention; its K/V projection is fused (below).
_CT2_CROSS = {
    "attention/layer_norm/gamma": "encoder_attn_layer_norm.weight",
    "attention/layer_norm/beta": "encoder_attn_layer_norm.bias",
    "attention/linear_0/weight": "encoder_attn.q_proj.weight",
    "attention/linear_0/bias": "encoder_attn.q_proj.bias",
    "attention/linear_2/weight": "encoder_attn.out_proj.weight",
    "attention/linear_2/bias": "encoder_attn.out_proj.bias",
}
# Fused projections: CTranslate2 prefix -> (our attention module, the parts in order).
_CT2_FUSED = {
    "self_attention/linear_0": ("self_attn", ("q_proj", "k_proj", "v_proj")),
    "attention/linear_1": ("encoder_attn", ("k_proj", "v_proj")),
}
_CT2_TOP = {
    "encoder/conv1/weight": "encoder.conv1.weight",
    "encoder/conv1/bias": "encoder.conv1.bias",
    "encoder/conv2/weight": "encoder.conv2.weight",
    "encoder/conv2/bias": "encoder.conv2.bias",
    "encoder/position_encodings/encodings": "encoder.embed_positions.weight",
    "encoder/layer_norm/gamma": "encoder.layer_norm.weight",
    "encoder/layer_norm/beta": "encoder.layer_norm.bias",
    "decoder/embeddings/weight": "decoder.embed_tokens.weight",
    "decoder/position_encodings/encodings": "decoder.embed_positions.weight",
    "decoder/layer_norm/gamma": "decoder.layer_norm.weight",
    "decoder/layer_norm/beta": "decoder.layer_norm.bias",
}
_CT2_LAYER_NAME = re.compile(r"^(encoder|decoder)/layer_(\d+)/(.+)$")
# The renamings; what no rule matches is a fused projection (split), a spec flag or not a
# Whisper weight.
_CT2_KEYS = WeightMap(
    *renames(_CT2_TOP),
    Rule("decoder/projection/weight", reason=_TIED),
    *renames(_CT2_LAYER, r"(encoder|decoder)/layer_(\d+)/", r"\1.layers.\2."),
    *renames(_CT2_CROSS, r"decoder/layer_(\d+)/", r"decoder.layers.\1."),
)
_CT2_GELU = 3  # CTranslate2 ActivationType: RELU, GELUTanh, SWISH, GELU, ...
# Spec flags our Whisper hard-codes: name -> the value it must have.
_CT2_REQUIRED_FLAGS = {
    "decoder/activation": _CT2_GELU,
    "decoder/pre_norm": 1,
    "decoder/scale_embeddings": 0,
    "decoder/alibi": 0,
    "encoder/activation": _CT2_GELU,
    "encoder/pre_norm": 1,
    "encoder/scale_embeddings": 0,
}


class Ct2WhisperConverter(_WhisperConverter):
    """CTranslate2 Whisper folders (faster-whisper): model.bin + config.json + tokenizer.json."""

    source_format = "ctranslate2"
    default_checkpoint_name = "model.bin"
    detect_specificity = 10
    looks_for = "model.bin whose CTranslate2 header names WhisperSpec, beside config.json"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        return (path / "config.json").is_file() and read_spec_name(path / "model.bin") == (
            "WhisperSpec"
        )

    def build_config(self, path: Path) -> WhisperConfig:
        path = Path(path)
        header = read_ct2_header(path / "model.bin")
        if header.spec_name != "WhisperSpec":
            raise ValueError(f"{path}/model.bin holds a {header.spec_name}, not a WhisperSpec")
        cfg = read_json(path / "config.json") or {}
        specials = whisper_special_tokens(path)
        flags = self._scalars(path, header)
        for name, want in _CT2_REQUIRED_FLAGS.items():
            if name in flags and flags[name] != want:
                raise ValueError(f"{path}: {name}={flags[name]} is not supported (our Whisper "
                                 f"needs {want})")

        def shape(name: str) -> tuple[int, ...]:
            return header.resolve(name).shape

        d_model, n_mels, _ = shape("encoder/conv1/weight")
        vocab_size = shape("decoder/embeddings/weight")[0]
        layers = {"encoder": 0, "decoder": 0}
        for name in header.names():
            m = _CT2_LAYER_NAME.match(name)
            if m:
                layers[m.group(1)] = max(layers[m.group(1)], int(m.group(2)) + 1)
        is_multilingual = vocab_size >= MULTILINGUAL_MIN_VOCAB
        languages = _language_ids(specials)
        if not is_multilingual:
            lang_to_id: dict[str, int] = {}
        elif cfg.get("lang_ids"):
            wanted = {int(i) for i in cfg["lang_ids"]}
            lang_to_id = {c: i for c, i in languages.items() if i in wanted}
        else:
            lang_to_id = languages
        task_to_id = _task_ids(specials)
        sot = _require(specials, "<|startoftranscript|>", path)
        eot = _require(specials, "<|endoftext|>", path)
        no_ts = _require(specials, "<|notimestamps|>", path)
        config = WhisperConfig(
            n_mels=n_mels,
            vocab_size=vocab_size,
            d_model=d_model,
            encoder_layers=layers["encoder"],
            encoder_attention_heads=int(flags["encoder/num_heads"]),
            decoder_layers=layers["decoder"],
            decoder_attention_heads=int(flags["decoder/num_heads"]),
            encoder_ffn_dim=shape("encoder/layer_0/ffn/linear_0/weight")[0],
            decoder_ffn_dim=shape("decoder/layer_0/ffn/linear_0/weight")[0],
            max_source_positions=shape("encoder/position_encodings/encodings")[0],
            max_target_positions=shape("decoder/position_encodings/encodings")[0],
            decoder_start_token_id=sot,
            eos_token_id=eot,
            pad_token_id=eot,
            no_timestamps_token_id=no_ts,
            sot_sequence=build_sot_sequence(sot, None, is_multilingual, lang_to_id, task_to_id,
                                            no_ts),
            suppress_tokens=[int(t) for t in cfg.get("suppress_ids") or []],
            begin_suppress_tokens=[int(t) for t in cfg.get("suppress_ids_begin") or []],
            alignment_heads=[[int(a), int(b)] for a, b in cfg.get("alignment_heads") or []],
            lang_to_id=lang_to_id,
            task_to_id=task_to_id,
            is_multilingual=is_multilingual,
        )
        config.validate()
        return config

    @staticmethod
    def _scalars(path: Path, header: Any) -> dict[str, int]:
        """The spec's scalar flags (num_heads, activation, ...) as ints."""
        out = {}
        with open(path / "model.bin", "rb") as f:
            for name, var in header.variables.items():
                if var.shape == () and var.nbytes <= 8:
                    f.seek(var.offset)
                    raw = bytearray(f.read(var.nbytes))
                    out[name] = int(torch.frombuffer(raw, dtype=torch.uint8).view(var.dtype)[0])
        for alias in header.aliases:
            target = header.resolve(alias).name
            if target in out:
                out[alias] = out[target]
        if "encoder/num_heads" not in out or "decoder/num_heads" not in out:
            raise ValueError(f"{path}/model.bin has no encoder/decoder num_heads")
        return out

    def map_weights(self, path: Path, config: WhisperConfig) -> MappedWeights:
        model = load_ct2(Path(path) / "model.bin")
        tensors = model.tensors
        if "decoder/projection/weight" in tensors:
            _check_tied(tensors["decoder/projection/weight"],
                        tensors.get("decoder/embeddings/weight"), "decoder/projection/weight")
        out, unmatched = _CT2_KEYS.apply({name: tensors[name] for name in sorted(tensors)})
        for name in unmatched:
            t = tensors[name]
            m = _CT2_LAYER_NAME.match(name)
            if m is None:
                out.drop(name, "CTranslate2 spec flag" if t.dim() == 0 else "not a Whisper weight")
                continue
            stack, index, rest = m.group(1), m.group(2), m.group(3)
            fused, _, kind = rest.rpartition("/")
            if fused in _CT2_FUSED and (stack == "decoder" or fused.startswith("self")):
                _split_fused(out, name, t, f"{stack}.layers.{index}.", *_CT2_FUSED[fused], kind,
                             config.d_model)
            else:
                out.drop(name, "not a Whisper weight")
        return out

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        path = Path(path)
        return _tokenizer_spec(path, _CT2_TOKENIZER_FILES, whisper_special_tokens(path))


def _split_fused(
    out: MappedWeights,
    name: str,
    t: torch.Tensor,
    prefix: str,
    module: str,
    parts: tuple[str, ...],
    kind: str,
    d_model: int,
) -> None:
    """Split a fused (len(parts) * d, ...) projection into per-part tensors along dim 0."""
    if t.shape[0] != len(parts) * d_model:
        raise ValueError(f"{name} has {t.shape[0]} rows; expected {len(parts)} x {d_model}")
    for j, part in enumerate(parts):
        rows = f"{name}[{j * d_model}:{(j + 1) * d_model}]"
        chunk = t[j * d_model:(j + 1) * d_model]
        if kind == "bias" and part == "k_proj":
            # Whisper's key projection has no bias; a constant key shift cancels in softmax.
            out.drop(rows, "k_proj has no bias in Whisper")
            continue
        out.put(f"{prefix}{module}.{part}.{kind}", chunk, rows)
