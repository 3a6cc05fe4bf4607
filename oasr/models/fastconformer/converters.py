"""transformers' Parakeet folders -> FastConformer: ``config.json`` + ``model.safetensors``.

``model_type`` picks the head: ``parakeet_ctc`` (``ParakeetForCTC``), ``parakeet_rnnt``
(``ParakeetForRNNT``) or ``parakeet_tdt`` (``ParakeetForTDT``). Dimensions come from
``encoder_config``; options this encoder does not implement are refused by name. The
frontend comes from ``preprocessor_config.json`` or ``processor_config.json`` (transformers 5's
processor layout) when the folder has one (transformers' ``ParakeetFeatureExtractor`` defaults
otherwise), the tokenizer from ``tokenizer.json``.
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
    read_feature_extractor_config,
    read_json,
)
from oasr.models.fastconformer.config import FastConformerConfig
from oasr.models.weight_map import Rule, WeightMap, keep_unmatched
from oasr.tokenizers.base import TokenizerSpec

__all__ = [
    "HfParakeetCtcConverter",
    "HfParakeetRnntConverter",
    "HfParakeetTdtConverter",
    "expected_shapes",
    "parakeet_logmel_features",
]

# Our names for transformers' per-block module names.
_BLOCK_NAMES = {
    "feed_forward1.linear1": "ff1.w_1", "feed_forward1.linear2": "ff1.w_2",
    "feed_forward2.linear1": "ff2.w_1", "feed_forward2.linear2": "ff2.w_2",
    "norm_feed_forward1": "norm_ff1", "norm_feed_forward2": "norm_ff2",
    "norm_self_att": "norm_attn", "norm_conv": "norm_conv", "norm_out": "norm_out",
    "self_attn.q_proj": "attn.linear_q", "self_attn.k_proj": "attn.linear_k",
    "self_attn.v_proj": "attn.linear_v", "self_attn.o_proj": "attn.linear_out",
    "self_attn.relative_k_proj": "attn.linear_pos",
    "conv.pointwise_conv1": "conv.pointwise_conv1", "conv.depthwise_conv": "conv.depthwise_conv",
    "conv.norm": "conv.norm", "conv.pointwise_conv2": "conv.pointwise_conv2",
}
# transformers' transducer modules -> ours (``oasr.models.fastconformer.transducer``).
_TRANSDUCER_NAMES = {
    "encoder_projector.": "joint.enc_proj.",
    "decoder.embedding.": "predictor.embedding.",
    "decoder.lstm.": "predictor.lstm.",
    "decoder.decoder_projector.": "joint.pred_proj.",
    "joint.head.": "joint.out.",
}
_POINTWISE = ("conv.pointwise_conv1", "conv.pointwise_conv2")
# Keys transformers saves that no parameter of ours stands for.
INV_FREQ = Rule(r".*\.inv_freq", reason="sinusoid frequencies (recomputed)")
HF_DROPS = WeightMap(Rule(r".*num_batches_tracked", reason="BatchNorm training counter"),
                     INV_FREQ)


def squeeze_kernel(t: torch.Tensor) -> torch.Tensor:
    """A width-1 Conv1d kernel ``(out, in, 1)`` as the Linear weight ``(out, in)`` we hold."""
    return t.squeeze(-1) if t.dim() == 3 else t


def block_renames(block_names: dict[str, str], layers: str, ours: str) -> tuple[Rule, ...]:
    """Per-block parameters: ``layers.N.<upstream>.<param>`` -> ``ours.N.<ours>.<param>``
    (``layers`` is a pattern, ``ours`` a template); pointwise kernels lose their width."""
    block = layers + r"\.(\d+)\."
    kernels = tuple(Rule(block + re.escape(up) + r"\.weight", ours + rf".\1.{name}.weight",
                         tensor=squeeze_kernel)
                    for up, name in block_names.items() if up.endswith(_POINTWISE))
    return (*kernels, *(
        Rule(block + re.escape(up) + r"\.(weight|bias|running_mean|running_var)",
             ours + rf".\1.{name}.\2") for up, name in block_names.items()))


def hf_renames(conv_index: dict[int, int], head: str) -> WeightMap:
    """transformers' Parakeet names -> ours (``conv_index``: ``_subsampling_indices``; CTC
    keeps ``ctc_head``, a transducer maps ``_TRANSDUCER_NAMES``; the other head's keys and
    unknown ones are unmatched)."""
    rules = [
        *block_renames(_BLOCK_NAMES, r"encoder\.layers", "encoder.layers"),
        Rule(r"encoder\.layers\.(\d+)\.self_attn\.bias_([uv])",
             r"encoder.layers.\1.attn.pos_bias_\2"),
        *(Rule(rf"encoder\.subsampling\.layers\.{hf}\.(weight|bias)",
               rf"encoder.subsampling.convs.{i}.\1") for hf, i in conv_index.items()),
        Rule(r"encoder\.subsampling\.linear\.(.*)", r"encoder.subsampling.out.\1"),
    ]
    if head == "ctc":
        rules += [Rule(r"ctc_head\.weight", "ctc_head.weight", tensor=squeeze_kernel),
                  Rule(r"ctc_head\..*", r"\g<0>")]
    else:
        rules += [Rule(re.escape(hf) + "(.*)", ours + r"\1")
                  for hf, ours in _TRANSDUCER_NAMES.items()]
    return WeightMap(*rules)


# encoder_config fields whose non-default values change the graph: (default, accepted).
_ENCODER_FIXED: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "subsampling_conv_stride": (2, (2,)),
    "num_key_value_heads": (None, (None,)),  # checked against num_attention_heads below
}
_MODEL_TYPES = {"parakeet_ctc": "ctc", "parakeet_rnnt": "rnnt", "parakeet_tdt": "tdt"}


def expected_shapes(config: FastConformerConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter and persistent buffer of the model for ``config``, built on meta."""
    from oasr.models.fastconformer.registry import model_class

    with torch.device("meta"):
        model = model_class(config.head)(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def parakeet_logmel_features(num_mel_bins: int, pre: dict[str, Any] | None = None
                             ) -> FeatureConfig:
    """transformers' ``ParakeetFeatureExtractor`` settings (``preprocessor_config.json`` or
    ``processor_config.json``'s ``feature_extractor``)."""
    pre = pre or {}
    sr = int(pre.get("sampling_rate", 16000))
    hop = int(pre.get("hop_length", 160))
    win = int(pre.get("win_length", 400))
    bins = int(pre.get("feature_size", num_mel_bins))
    if bins != num_mel_bins:
        raise ValueError(f"the feature extractor's feature_size={bins} but the encoder reads "
                         f"num_mel_bins={num_mel_bins}")
    return FeatureConfig(
        "parakeet_logmel", sample_rate=sr, num_mel_bins=bins,
        frame_shift_ms=hop * 1000.0 / sr, frame_length_ms=win * 1000.0 / sr,
        params={"n_fft": int(pre.get("n_fft", 512)),
                "preemphasis": float(pre.get("preemphasis", 0.97) or 0.0)},
    )


def hf_config_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The ``FastConformerConfig`` fields a transformers Parakeet-family ``config.json`` gives
    (encoder, vocabulary, prediction network and joint), transformers' defaults where absent;
    the head and its blank id are the caller's."""
    enc = dict(cfg.get("encoder_config") or {})
    return dict(
        num_mel_bins=int(enc.get("num_mel_bins", 80)),
        d_model=int(enc.get("hidden_size", 1024)),
        layers=int(enc.get("num_hidden_layers", 24)),
        heads=int(enc.get("num_attention_heads", 8)),
        ff_dim=int(enc.get("intermediate_size", 4096)),
        conv_kernel=int(enc.get("conv_kernel_size", 9)),
        subsampling_factor=int(enc.get("subsampling_factor", 8)),
        subsampling_channels=int(enc.get("subsampling_conv_channels", 256)),
        subsampling_kernel=int(enc.get("subsampling_conv_kernel_size", 3)),
        xscale=bool(enc.get("scale_input", True)),
        attention_bias=bool(enc.get("attention_bias", True)),
        conv_bias=bool(enc.get("convolution_bias", True)),
        activation=str(enc.get("hidden_act", "silu")),
        vocab_size=int(cfg.get("vocab_size", 1025)),
        pred_hidden=int(cfg.get("decoder_hidden_size", 640)),
        pred_layers=int(cfg.get("num_decoder_layers", 2)),
        joint_activation=str(cfg.get("hidden_act", "relu")),
        max_symbols_per_step=int(cfg.get("max_symbols_per_step", 10)),
    )


class _HfParakeetConverter(BaseCheckpointConverter):
    source_format = "huggingface"
    detect_specificity = 20
    config_class = "oasr.models.fastconformer.config:FastConformerConfig"
    head = ""

    @property
    def looks_for(self) -> str:  # type: ignore[override]
        model_type = next(k for k, v in _MODEL_TYPES.items() if v == self.head)
        return f"config.json with model_type '{model_type}' beside model.safetensors"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_dir() or not has_hf_weights(path):
            return False
        cfg = read_json(path / "config.json")
        return bool(cfg) and _MODEL_TYPES.get(str(cfg.get("model_type"))) == self.head

    def build_config(self, path: Path) -> FastConformerConfig:
        path = Path(path)
        cfg = read_json(path / "config.json")
        if not cfg or _MODEL_TYPES.get(str(cfg.get("model_type"))) != self.head:
            raise ValueError(f"{path}/config.json is not a transformers "
                             f"parakeet_{self.head} config")
        enc = dict(cfg.get("encoder_config") or {})
        problems = []
        for key, (default, accepted) in _ENCODER_FIXED.items():
            value = enc.get(key, default)
            if key == "num_key_value_heads":
                if value not in (None, enc.get("num_attention_heads", 8)):
                    problems.append(f"encoder_config.num_key_value_heads={value} (grouped "
                                    "attention is not implemented)")
            elif value not in accepted:
                problems.append(f"encoder_config.{key}={value!r} (supported: {accepted})")
        if problems:
            raise ValueError(f"{path}/config.json: unsupported options: " + "; ".join(problems))
        vocab = int(cfg.get("vocab_size", 1025))
        if self.head == "ctc":
            blank = int(cfg.get("pad_token_id", vocab - 1))  # transformers' CTC blank
        else:
            blank = int(cfg.get("blank_token_id", vocab - 1))
        return FastConformerConfig(
            **hf_config_fields(cfg), head=self.head, blank_id=blank,
            durations=list(cfg.get("durations", [0, 1, 2, 3, 4])),
        )

    def expected_shapes(self, config: FastConformerConfig) -> dict[str, tuple[int, ...]]:
        return expected_shapes(config)

    def map_weights(self, path: Path, config: FastConformerConfig) -> MappedWeights:
        raw = load_hf_weights(path)
        rules = HF_DROPS + hf_renames(_subsampling_indices(config), self.head)
        return keep_unmatched(raw, *rules.apply(raw))

    def build_feature_config(self, config: FastConformerConfig) -> FeatureConfig:
        pre = getattr(self, "_pre", None)
        return parakeet_logmel_features(config.num_mel_bins, pre)

    def convert(self, src: str | Path, dst: str | Path, *args: Any, **kwargs: Any) -> Any:
        self._pre = read_feature_extractor_config(Path(src))
        return super().convert(src, dst, *args, **kwargs)

    def build_decoding_defaults(self, config: FastConformerConfig, path: Path) -> dict[str, Any]:
        # NeMo and transformers decode Parakeet greedily; the CTC family's default is a beam.
        if self.head == "ctc":
            return {"beam_size": 1}
        return {"max_sym_per_frame": config.max_symbols_per_step} if self.head == "rnnt" else {}

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        if not (Path(path) / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{path} has no tokenizer.json (transformers' Parakeet "
                                    "tokenizer); save the processor beside the model")
        return TokenizerSpec(kind="huggingface", files={"tokenizer_json": "tokenizer.json"})


def _subsampling_indices(config: FastConformerConfig) -> dict[int, int]:
    """transformers' ``subsampling.layers`` index (ReLUs counted) -> our ``convs`` index."""
    hf = [0]
    for stage in range(config.subsampling_stages - 1):
        hf += [2 + 3 * stage, 3 + 3 * stage]
    return {h: i for i, h in enumerate(hf)}


class HfParakeetCtcConverter(_HfParakeetConverter):
    architecture = "parakeet_ctc"
    head = "ctc"


class HfParakeetRnntConverter(_HfParakeetConverter):
    architecture = "parakeet_rnnt"
    head = "rnnt"


class HfParakeetTdtConverter(_HfParakeetConverter):
    architecture = "parakeet_tdt"
    head = "tdt"
