"""icefall Zipformer folders -> ``ZipformerModel``: ``pretrained.pt`` or ``epoch-N.pt``
(a ``model`` state dict) beside ``bpe.model`` (sentencepiece) or ``tokens.txt``.

The configuration comes from the checkpoint: icefall's training checkpoints carry the run's
``params`` at top level (``num_heads="4,4,4,8,4,4"``, ``causal``...), which are read when
present; everything else is read from the tensors' shapes. What shapes cannot decide alone
(the head split of the attention projections, the feature width) falls back to icefall's
defaults (``query_head_dim`` 32, ``pos_head_dim`` 4, 80 mel bins) only when the shapes agree
with them; otherwise the conversion stops naming the option to put in ``params.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

from oasr.features.spec import FeatureConfig
from oasr.models.converter import BaseCheckpointConverter, MappedWeights
from oasr.models.safe_load import UnsafeCheckpointError, load_torch_checkpoint
from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.converters import model_state_dict
from oasr.tokenizers.base import TokenizerSpec

__all__ = ["IcefallZipformerConverter", "config_from_state_dict"]

CHECKPOINT_NAMES = ("pretrained.pt",)
_EPOCH = re.compile(r"^epoch-(\d+)\.pt$")
PARAMS_FILE = "params.json"
_PER_STACK = ("downsampling_factor", "encoder_dim", "num_encoder_layers", "query_head_dim",
              "pos_head_dim", "value_head_dim", "num_heads", "feedforward_dim",
              "cnn_module_kernel")
_SCALARS = ("feature_dim", "pos_dim", "causal", "decoder_dim", "joiner_dim", "context_size",
            "vocab_size", "blank_id", "decode_chunk_size", "decode_left_context_frames")


def checkpoint_file(folder: Path) -> Path | None:
    for name in CHECKPOINT_NAMES:
        if (folder / name).is_file():
            return folder / name
    epochs = sorted((int(m.group(1)), p) for p in folder.glob("epoch-*.pt")
                    if (m := _EPOCH.match(p.name)))
    return epochs[-1][1] if epochs else None


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(the ``model`` state dict, the run's top-level params)."""
    ckpt = load_torch_checkpoint(path)
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise ValueError(f"{path} has no 'model' state dict (an icefall checkpoint holds one)")
    params = {k: v for k, v in ckpt.items() if k in _PER_STACK + _SCALARS}
    return ckpt["model"], params


def _ints(v: Any) -> tuple[int, ...]:
    if isinstance(v, str):
        return tuple(int(x) for x in v.split(","))
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)


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
    dims, layers, ffs, kernels, heads, qd, pd, vd = [], [], [], [], [], [], [], []
    pos_dim = None
    for i in range(n):
        p = stack_prefix(i)
        idx = {int(k[len(p) + 7:].split(".")[0]) for k in state if k.startswith(p + "layers.")}
        layers.append(len(idx))
        lp = p + "layers.0."
        dims.append(int(state[lp + "norm.bias"].shape[0]))
        ffs.append(int(state[lp + "feed_forward2.in_proj.weight"].shape[0]))
        kernels.append(int(state[lp + "conv_module1.depthwise_conv.chunkwise_conv.weight"
                                 if lp + "conv_module1.depthwise_conv.chunkwise_conv.weight"
                                 in state else lp + "conv_module1.depthwise_conv.weight"
                                 ].shape[-1]))
        pos_w = state[lp + "self_attn_weights.linear_pos.weight"]  # (heads * pd, pos_dim)
        pos_dim = int(pos_w.shape[1])
        in_proj = int(state[lp + "self_attn_weights.in_proj.weight"].shape[0])
        values = int(state[lp + "self_attn1.in_proj.weight"].shape[0])
        given = {k: _ints(params[k])[i % len(_ints(params[k]))] for k in
                 ("num_heads", "query_head_dim", "pos_head_dim", "value_head_dim")
                 if k in params}
        p_dim = given.get("pos_head_dim", 4)
        h = given.get("num_heads", int(pos_w.shape[0]) // p_dim)
        q = given.get("query_head_dim", (in_proj // h - p_dim) // 2 if h else 0)
        if h * p_dim != pos_w.shape[0] or (2 * q + p_dim) * h != in_proj or values % h:
            raise ValueError(f"stack {i}: the attention shapes do not split into heads with "
                             f"pos_head_dim={p_dim}; put num_heads, query_head_dim, "
                             f"pos_head_dim and value_head_dim in {PARAMS_FILE}")
        heads.append(h)
        qd.append(q)
        pd.append(p_dim)
        vd.append(values // h)
    causal = "encoder.encoders.0.layers.0.conv_module1.depthwise_conv.causal_conv.weight" in state
    out_w = state["encoder_embed.out.weight"]
    l3 = int(state["encoder_embed.conv.7.weight"].shape[0])
    feature_dim = int(params.get("feature_dim", 80))
    if (((feature_dim - 1) // 2) - 1) // 2 * l3 != out_w.shape[1]:
        raise ValueError(f"encoder_embed.out reads {out_w.shape[1]} inputs, which "
                         f"feature_dim={feature_dim} does not give; put feature_dim in "
                         f"{PARAMS_FILE}")
    use_transducer = "joiner.output_linear.weight" in state
    use_ctc = "ctc_output.1.weight" in state
    vocab = int(state["joiner.output_linear.weight"].shape[0] if use_transducer
                else state["ctc_output.1.weight"].shape[0])
    kw: dict[str, Any] = dict(
        feature_dim=feature_dim, downsampling_factor=ds, encoder_dim=tuple(dims),
        num_encoder_layers=tuple(layers), query_head_dim=tuple(qd), pos_head_dim=tuple(pd),
        value_head_dim=tuple(vd), num_heads=tuple(heads), feedforward_dim=tuple(ffs),
        cnn_module_kernel=tuple(kernels), pos_dim=pos_dim,
        output_downsampling_factor=int(state["encoder.downsample_output.bias"].shape[0]),
        causal=bool(params.get("causal", causal)),
        layer1_channels=int(state["encoder_embed.conv.0.weight"].shape[0]),
        layer2_channels=int(state["encoder_embed.conv.4.weight"].shape[0]),
        layer3_channels=l3, vocab_size=vocab, blank_id=int(params.get("blank_id", 0)),
        use_ctc=use_ctc, use_transducer=use_transducer)
    for key in ("decode_chunk_size", "decode_left_context_frames"):
        if key in params:
            kw[key] = int(params[key])
    if use_transducer:
        kw.update(decoder_dim=int(state["decoder.embedding.weight"].shape[1]),
                  joiner_dim=int(state["joiner.output_linear.weight"].shape[1]),
                  context_size=int(state["decoder.conv.weight"].shape[-1])
                  if "decoder.conv.weight" in state else 1)
    return ZipformerConfig(**kw)


class IcefallZipformerConverter(BaseCheckpointConverter):
    architecture = "zipformer"
    source_format = "icefall"
    detect_specificity = 10
    looks_for = ("pretrained.pt or epoch-N.pt with a 'model' state dict holding "
                 "encoder_embed.* and encoder.encoders.*, beside bpe.model or tokens.txt")
    config_class = "oasr.models.zipformer.config:ZipformerConfig"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_dir() or checkpoint_file(path) is None:
            return False
        if not ((path / "bpe.model").is_file() or (path / "tokens.txt").is_file()):
            return False
        try:
            state, _ = read_checkpoint(checkpoint_file(path))
        except UnsafeCheckpointError:
            raise  # this layout, refused: say why rather than "no format recognises it"
        except Exception:  # noqa: BLE001 - not this format
            return False
        return "encoder_embed.out.weight" in state and any(
            k.startswith("encoder.encoders.") for k in state)

    def _params(self, path: Path) -> dict[str, Any]:
        _, params = read_checkpoint(checkpoint_file(path))
        extra = Path(path) / PARAMS_FILE
        if extra.is_file():
            params.update(json.loads(extra.read_text(encoding="utf-8")))
        return params

    def build_config(self, path: Path) -> ZipformerConfig:
        state, _ = read_checkpoint(checkpoint_file(Path(path)))
        return config_from_state_dict(state, self._params(Path(path)))

    def expected_shapes(self, config: ZipformerConfig) -> dict[str, tuple[int, ...]]:
        from oasr.models.zipformer.model import ZipformerModel

        with torch.device("meta"):
            model = ZipformerModel(config)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}

    def map_weights(self, path: Path, config: ZipformerConfig) -> MappedWeights:
        state, _ = read_checkpoint(checkpoint_file(Path(path)))
        mapped = MappedWeights()
        ours = model_state_dict(state)
        for key, value in ours.items():
            mapped.put(key, value, key)
        for key in state:
            if key.startswith(("simple_am_proj.", "simple_lm_proj.")):
                mapped.drop(key, "training-only (pruned RNN-T loss projection)")
        return mapped

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        path = Path(path)
        if (path / "bpe.model").is_file():
            return TokenizerSpec(kind="sentencepiece", files={"model": "bpe.model"})
        if (path / "tokens.txt").is_file():
            return TokenizerSpec(kind="symbol_table", files={"units": "tokens.txt"})
        raise FileNotFoundError(f"{path} has neither bpe.model nor tokens.txt")

    def build_feature_config(self, config: ZipformerConfig) -> FeatureConfig:
        # icefall's lhotse/kaldifeat fbank: 25 ms window, 10 ms hop, no dither at decode.
        return FeatureConfig(feature_type="fbank", sample_rate=16000,
                             num_mel_bins=config.feature_dim, frame_shift_ms=10,
                             frame_length_ms=25, params={"dither": 0.0})
