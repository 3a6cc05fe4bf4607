"""icefall Zipformer checkpoints -> ``ZipformerModel``, in the layouts icefall ships
(``layout.py``: a recipe folder's ``exp/`` + ``data/lang_*``, its ``exp`` folder, or a flat
folder).

The configuration: the run's training arguments where the checkpoint keeps them (train.py's
``epoch-N.pt`` carries its ``params`` at top level: ``num_heads="4,4,4,8,4,4"``, ``causal``,
``chunk_size="16,32,64,-1"``...), then a params file (``--params FILE``, or ``params.json``
beside the checkpoint) over them, and the tensors' shapes for the rest. What neither decides
(export.py's ``pretrained.pt`` keeps no params) falls back to icefall's defaults, each named in
the load report's notes: the head split (``pos_head_dim`` 4) and the feature width (80) only
where the shapes agree with them; for a causal checkpoint the decode chunk (16) and left
context (128), the values icefall's decode instructions use, unless the params hold single
values (``decode_chunk_size`` / ``decode_left_context_frames``, or one-value ``chunk_size``
/ ``left_context_frames``).

The front end is lhotse's fbank (``oasr.features.recipes.lhotse_fbank``), what icefall trains
and decodes with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from oasr.features.recipes import lhotse_fbank
from oasr.features.spec import FeatureConfig
from oasr.models.converter import BaseCheckpointConverter, MappedWeights
from oasr.models.safe_load import UnsafeCheckpointError
from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.converters import model_state_dict
from oasr.models.zipformer.layout import IcefallLayout, LayoutError, find_layout, read_checkpoint
from oasr.tokenizers.base import TokenizerSpec

__all__ = ["IcefallZipformerConverter", "config_from_state_dict", "read_checkpoint"]

PARAMS_FILE = "params.json"
_PER_STACK = ("downsampling_factor", "encoder_dim", "num_encoder_layers", "query_head_dim",
              "pos_head_dim", "value_head_dim", "num_heads", "feedforward_dim",
              "cnn_module_kernel")
_SCALARS = ("feature_dim", "pos_dim", "causal", "decoder_dim", "joiner_dim", "context_size",
            "vocab_size", "blank_id", "chunk_size", "left_context_frames", "decode_chunk_size",
            "decode_left_context_frames", "decode_tail_pad_frames")
# icefall's decode instructions (pretrained.py, decode.py, streaming_decode.py docstrings).
DECODE_CHUNK, DECODE_LEFT = 16, 128
_DEFAULT_FEATURE_DIM, _DEFAULT_POS_HEAD_DIM = 80, 4


def _ints(v: Any) -> tuple[int, ...]:
    if isinstance(v, str):
        return tuple(int(x) for x in v.split(","))
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)


def _heads(state: dict[str, torch.Tensor], lp: str, i: int, params: dict[str, Any]
           ) -> tuple[int, int, int, int]:
    """(num_heads, query_head_dim, pos_head_dim, value_head_dim) of stack ``i``."""
    pos_w = state[lp + "self_attn_weights.linear_pos.weight"]  # (heads * pd, pos_dim)
    in_proj = int(state[lp + "self_attn_weights.in_proj.weight"].shape[0])
    values = int(state[lp + "self_attn1.in_proj.weight"].shape[0])
    given = {k: _ints(params[k])[i % len(_ints(params[k]))] for k in
             ("num_heads", "query_head_dim", "pos_head_dim", "value_head_dim") if k in params}
    p_dim = given.get("pos_head_dim", _DEFAULT_POS_HEAD_DIM)
    h = given.get("num_heads", int(pos_w.shape[0]) // p_dim)
    q = given.get("query_head_dim", (in_proj // h - p_dim) // 2 if h else 0)
    if h * p_dim != pos_w.shape[0] or (2 * q + p_dim) * h != in_proj or values % h:
        raise ValueError(f"stack {i}: the attention shapes do not split into heads with "
                         f"pos_head_dim={p_dim}; give num_heads, query_head_dim, pos_head_dim "
                         f"and value_head_dim with --params (or {PARAMS_FILE})")
    return h, q, p_dim, values // h


def config_from_state_dict(state: dict[str, torch.Tensor],
                           params: dict[str, Any] | None = None) -> ZipformerConfig:
    """The model geometry from the tensors' shapes, ``params`` overriding where given."""
    params = dict(params or {})
    n = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("encoder.encoders."))

    def stack_prefix(i: int) -> str:
        ds = f"encoder.encoders.{i}.downsample.bias"
        return f"encoder.encoders.{i}.encoder." if ds in state else f"encoder.encoders.{i}."

    ds = tuple(int(state[f"encoder.encoders.{i}.downsample.bias"].shape[0])
               if f"encoder.encoders.{i}.downsample.bias" in state else 1 for i in range(n))
    dims, layers, ffs, kernels, heads = [], [], [], [], []
    for i in range(n):
        p = stack_prefix(i)
        idx = {int(k[len(p) + 7:].split(".")[0]) for k in state if k.startswith(p + "layers.")}
        layers.append(len(idx))
        lp = p + "layers.0."
        dims.append(int(state[lp + "norm.bias"].shape[0]))
        ffs.append(int(state[lp + "feed_forward2.in_proj.weight"].shape[0]))
        conv = lp + "conv_module1.depthwise_conv."
        kernels.append(int(state[conv + "chunkwise_conv.weight" if conv + "chunkwise_conv.weight"
                                 in state else conv + "weight"].shape[-1]))
        heads.append(_heads(state, lp, i, params))
    pos_dim = int(state[stack_prefix(0) + "layers.0.self_attn_weights.linear_pos.weight"]
                  .shape[1])
    causal = is_causal(state)
    if "causal" in params and bool(params["causal"]) != causal:
        raise ValueError(f"the params say causal={params['causal']} but the checkpoint's "
                         f"convolutions are {'' if causal else 'not '}chunk-causal; fix the "
                         "params")
    out_w = state["encoder_embed.out.weight"]
    l3 = int(state["encoder_embed.conv.7.weight"].shape[0])
    feature_dim = int(params.get("feature_dim", _DEFAULT_FEATURE_DIM))
    if (((feature_dim - 1) // 2) - 1) // 2 * l3 != out_w.shape[1]:
        raise ValueError(f"encoder_embed.out reads {out_w.shape[1]} inputs, which "
                         f"feature_dim={feature_dim} does not give; give feature_dim with "
                         f"--params (or {PARAMS_FILE})")
    use_transducer = "joiner.output_linear.weight" in state
    use_ctc = "ctc_output.1.weight" in state
    vocab = int(state["joiner.output_linear.weight"].shape[0] if use_transducer
                else state["ctc_output.1.weight"].shape[0])
    kw: dict[str, Any] = dict(
        feature_dim=feature_dim, downsampling_factor=ds, encoder_dim=tuple(dims),
        num_encoder_layers=tuple(layers), query_head_dim=tuple(h[1] for h in heads),
        pos_head_dim=tuple(h[2] for h in heads), value_head_dim=tuple(h[3] for h in heads),
        num_heads=tuple(h[0] for h in heads), feedforward_dim=tuple(ffs),
        cnn_module_kernel=tuple(kernels), pos_dim=pos_dim,
        output_downsampling_factor=int(state["encoder.downsample_output.bias"].shape[0]),
        causal=causal, layer1_channels=int(state["encoder_embed.conv.0.weight"].shape[0]),
        layer2_channels=int(state["encoder_embed.conv.4.weight"].shape[0]),
        layer3_channels=l3, vocab_size=vocab, blank_id=int(params.get("blank_id", 0)),
        use_ctc=use_ctc, use_transducer=use_transducer)
    kw["decode_chunk_size"], kw["decode_left_context_frames"] = decode_chunks(params)[:2]
    if "decode_tail_pad_frames" in params:
        kw["decode_tail_pad_frames"] = int(params["decode_tail_pad_frames"])
    if use_transducer:
        kw.update(decoder_dim=int(state["decoder.embedding.weight"].shape[1]),
                  joiner_dim=int(state["joiner.output_linear.weight"].shape[1]),
                  context_size=int(state["decoder.conv.weight"].shape[-1])
                  if "decoder.conv.weight" in state else 1)
    return ZipformerConfig(**kw)


def is_causal(state: dict[str, torch.Tensor]) -> bool:
    return any(k.endswith("conv_module1.depthwise_conv.causal_conv.weight") for k in state)


def decode_chunks(params: dict[str, Any]) -> tuple[int, int, list[str]]:
    """(decode chunk size, left context frames, what was assumed) from the params."""
    out, notes = [], []
    for key, train_key, default in (("decode_chunk_size", "chunk_size", DECODE_CHUNK),
                                    ("decode_left_context_frames", "left_context_frames",
                                     DECODE_LEFT)):
        if key in params:
            out.append(int(params[key]))
            continue
        values = _ints(params[train_key]) if train_key in params else ()
        if len(values) == 1 and values[0] > 0:
            out.append(values[0])
            continue
        out.append(default)
        seen = f"trained with {train_key}={params[train_key]!r}" if values else (
            f"no {train_key} in the checkpoint")
        notes.append(f"{key}={default} ({seen}; icefall's decode instructions use "
                     f"{train_key.replace('_', '-')} {default}): set it with --params, or per "
                     f"run with -d {train_key}=N")
    return out[0], out[1], notes


class IcefallZipformerConverter(BaseCheckpointConverter):
    architecture = "zipformer"
    source_format = "icefall"
    detect_specificity = 10
    looks_for = ("an icefall recipe folder (exp/pretrained.pt or exp/epoch-N.pt with a 'model' "
                 "state dict holding encoder_embed.* and encoder.encoders.*, and "
                 "data/lang_*/bpe.model or tokens.txt), its exp folder, or a flat folder of both")
    config_class = "oasr.models.zipformer.config:ZipformerConfig"

    def __init__(self, checkpoint_name: str | None = None, params_file: str | None = None
                 ) -> None:
        self.checkpoint_name = checkpoint_name
        self.params_file = None if params_file is None else Path(params_file)

    def _layout(self, path: Path) -> IcefallLayout:
        layout = find_layout(Path(path), self.checkpoint_name)
        if layout is None:
            raise FileNotFoundError(f"{path} holds no icefall checkpoint beside a tokenizer "
                                    f"({self.looks_for})")
        return layout

    def detect(self, path: Path) -> bool:
        try:
            layout = find_layout(Path(path), self.checkpoint_name)
            if layout is None:
                return False
            state, _ = read_checkpoint(layout.checkpoint)
        except UnsafeCheckpointError:
            raise  # this layout, refused: say why rather than "no format recognises it"
        except LayoutError:
            return True  # ours, but inconsistent: convert says why
        except Exception:  # noqa: BLE001 - not this format
            return False
        return "encoder_embed.out.weight" in state and any(
            k.startswith("encoder.encoders.") for k in state)

    def _params(self, layout: IcefallLayout) -> dict[str, Any]:
        _, extra = read_checkpoint(layout.checkpoint)
        params = {k: v for k, v in extra.items() if k in _PER_STACK + _SCALARS}
        files = [layout.checkpoint.parent / PARAMS_FILE, layout.root / PARAMS_FILE]
        if self.params_file is not None:
            if not self.params_file.is_file():
                raise FileNotFoundError(f"--params {self.params_file}: no such file")
            files.append(self.params_file)
        for f in dict.fromkeys(files):
            if f.is_file():
                try:
                    given = json.loads(f.read_text(encoding="utf-8"))
                except ValueError as exc:
                    raise ValueError(f"{f} is not JSON ({exc}); write the training arguments "
                                     "as a JSON object") from exc
                if not isinstance(given, dict):
                    raise ValueError(f"{f} holds a JSON {type(given).__name__}, not an object")
                params.update(given)
        return params

    def build_config(self, path: Path) -> ZipformerConfig:
        layout = self._layout(path)
        state, _ = read_checkpoint(layout.checkpoint)
        return config_from_state_dict(state, self._params(layout))

    def conversion_notes(self, path: Path, config: ZipformerConfig) -> list[str]:
        layout = self._layout(path)
        params = self._params(layout)
        notes = [f"checkpoint {layout.checkpoint}" + (
            f" (also there: {', '.join(layout.others)}; pick one with --checkpoint-name)"
            if layout.others else "")]
        notes.append(f"tokenizer {layout.root / next(iter(layout.tokenizer.files.values()))}")
        if "num_heads" not in params:
            notes.append(f"attention heads read from the shapes with pos_head_dim="
                         f"{_DEFAULT_POS_HEAD_DIM} (icefall's default): num_heads="
                         f"{','.join(map(str, config.num_heads))}, query_head_dim="
                         f"{','.join(map(str, config.query_head_dim))}")
        if "feature_dim" not in params:
            notes.append(f"feature_dim={_DEFAULT_FEATURE_DIM} (icefall's default; the shapes "
                         "fit it)")
        if config.causal:
            notes += decode_chunks(params)[2]
        return notes

    def expected_shapes(self, config: ZipformerConfig) -> dict[str, tuple[int, ...]]:
        from oasr.models.zipformer.model import ZipformerModel

        with torch.device("meta"):
            model = ZipformerModel(config)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}

    def map_weights(self, path: Path, config: ZipformerConfig) -> MappedWeights:
        state, _ = read_checkpoint(self._layout(path).checkpoint)
        mapped = MappedWeights()
        for key, value in model_state_dict(state).items():
            mapped.put(key, value, key)
        for key in state:
            if key.startswith(("simple_am_proj.", "simple_lm_proj.")):
                mapped.drop(key, "training-only (pruned RNN-T loss projection)")
        return mapped

    def tokenizer_root(self, path: Path) -> Path:
        return self._layout(path).root

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        return self._layout(path).tokenizer

    def build_decoding_defaults(self, config: ZipformerConfig, path: Path) -> dict[str, Any]:
        # icefall's CTC decoding (ctc-decoding, ctc-greedy-search) is the best path.
        return {"beam_size": 1}

    def build_feature_config(self, config: ZipformerConfig) -> FeatureConfig:
        return lhotse_fbank(config.feature_dim)
