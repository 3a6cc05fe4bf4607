"""WeNet checkpoint folders -> the Conformer: ``train.yaml`` + ``final.pt`` + ``units.txt``.

A WeNet experiment or released model folder holds the training config (``train.yaml``), the
state dict (``final.pt``, or an averaged ``avg_N.pt``: pick it with ``checkpoint_name``), the
symbol table (``units.txt``, ``tokens.txt`` in some exports) and usually the CMVN stats
(``global_cmvn``). Everything is read from those files: dimensions and options from
``train.yaml`` (WeNet's defaults where a key is absent, as WeNet itself builds the model),
special ids from the config and the symbol table, the CMVN from the checkpoint's own buffers
(what WeNet loads last) or, failing them, from the stats file.

Options WeNet has but this Conformer does not implement are refused by name, never ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from oasr.features.spec import FeatureConfig
from oasr.models.conformer.config import (
    CONV_NORMS,
    DECODER_ACTIVATIONS,
    ENCODER_ACTIVATIONS,
    SUBSAMPLING_LAYERS,
    ConformerConfig,
)
from oasr.models.converter import BaseCheckpointConverter, MappedWeights, read_yaml
from oasr.models.safe_load import load_torch_checkpoint
from oasr.models.weight_map import Rule, WeightMap
from oasr.tokenizers.base import TokenizerSpec
from oasr.tokenizers.symbol_table import read_symbol_table

__all__ = ["WenetConformerConverter", "read_train_yaml"]

CONFIG_NAME = "train.yaml"
UNITS_NAMES = ("units.txt", "tokens.txt")
SAMPLE_RATE = 16000
FRAME_SHIFT_MS = 10
FRAME_LENGTH_MS = 25

# Options whose non-default values change the graph: key -> (WeNet's default, accepted values).
# The attention and feed-forward options WeNet's encoder and decoder layers both take:
_LAYER_FIXED: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "normalize_before": (True, (True,)),
    "layer_norm_type": ("layer_norm", ("layer_norm",)),
    "mlp_type": ("position_wise_feed_forward", ("position_wise_feed_forward",)),
    "mlp_bias": (True, (True,)),
    "query_bias": (True, (True,)),
    "key_bias": (True, (True,)),
    "value_bias": (True, (True,)),
    "n_kv_head": (None, (None,)),
    "head_dim": (None, (None,)),
}
_ENCODER_FIXED: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "pos_enc_layer_type": ("rel_pos", ("rel_pos",)),
    "selfattention_layer_type": ("rel_selfattn", ("rel_selfattn",)),
    **_LAYER_FIXED,
    "conv_inner_factor": (2, (2,)),
    "final_norm": (True, (True,)),
    "input_layer": ("conv2d", tuple(SUBSAMPLING_LAYERS)),
    "activation_type": ("swish", ENCODER_ACTIVATIONS),
    "cnn_module_norm": ("batch_norm", CONV_NORMS),
}
_DECODER_FIXED: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "input_layer": ("embed", ("embed",)),
    "use_output_layer": (True, (True,)),
    "src_attention": (True, (True,)),
    **_LAYER_FIXED,
    "src_query_bias": (True, (True,)),
    "src_key_bias": (True, (True,)),
    "src_value_bias": (True, (True,)),
    "activation_type": ("relu", DECODER_ACTIVATIONS),
}


def _squeeze_kernel_one(t: torch.Tensor) -> torch.Tensor:
    """A pointwise Conv1d weight (out, in, 1) as the Linear weight (out, in) we load."""
    return t.squeeze(-1) if t.dim() == 3 and t.shape[-1] == 1 else t


def _wenet_keys(global_cmvn: bool) -> WeightMap:
    """WeNet's names are ours: this drops what we recompute or do not use, and keeps every
    other key (one we do not know is refused by the load report as unexpected)."""
    rules = [Rule(r"(?=.*\.(?:pos_enc|embed\.1)\.).*\.pe",
                  reason="sinusoidal position table (recomputed)"),
             Rule(r".*\.num_batches_tracked", reason="BatchNorm training counter")]
    if not global_cmvn:
        rules.append(Rule(r"encoder\.global_cmvn\..*",
                          reason="train.yaml declares no global CMVN (WeNet skips it too)"))
    return WeightMap(*rules,
                     Rule(r".*\.conv_module\.pointwise_conv[12]\.weight", r"\g<0>",
                          tensor=_squeeze_kernel_one),
                     Rule(r".*", r"\g<0>"))


def read_train_yaml(folder: Path) -> dict[str, Any] | None:
    """WeNet's training config from ``folder/train.yaml``, or ``None`` when it is absent.

    Raises:
        CorruptCheckpointFileError: the file exists but does not parse as a YAML mapping; the
            message names it.
    """
    return read_yaml(Path(folder) / CONFIG_NAME)


def _units_file(folder: Path) -> Path | None:
    for name in UNITS_NAMES:
        if (folder / name).is_file():
            return folder / name
    return None


def _check_options(section: str, conf: dict[str, Any],
                   fixed: dict[str, tuple[Any, tuple[Any, ...]]], problems: list[str]) -> None:
    for key, (default, accepted) in fixed.items():
        value = conf.get(key, default)
        if value not in accepted:
            valid = ", ".join(repr(v) for v in accepted)
            problems.append(f"{section}.{key}={value!r} (supported: {valid})")


class WenetConformerConverter(BaseCheckpointConverter):
    """WeNet ``ASRModel`` folders with a ``conformer`` encoder (U2 and U2++)."""

    architecture = "conformer"
    source_format = "wenet"
    default_checkpoint_name = "final.pt"
    detect_specificity = 10
    looks_for = ("train.yaml with 'encoder: conformer' beside a .pt checkpoint (final.pt) and "
                 "units.txt or tokens.txt")
    config_class = "oasr.models.conformer.config:ConformerConfig"

    def __init__(self, checkpoint_name: str | None = None) -> None:
        self.checkpoint_name = checkpoint_name or self.default_checkpoint_name

    # -- detection ----------------------------------------------------------------------------
    def detect(self, path: Path) -> bool:
        path = Path(path)
        if not path.is_dir() or _units_file(path) is None:
            return False
        cfg = read_train_yaml(path)
        if not cfg or cfg.get("encoder") != "conformer":
            return False
        if cfg.get("model", "asr_model") != "asr_model":
            return False
        return any(path.glob("*.pt"))

    def checkpoint_path(self, path: Path) -> Path:
        """The state-dict file; a missing one names the checkpoints the folder does have."""
        ckpt = Path(path) / self.checkpoint_name
        if not ckpt.is_file():
            others = sorted(p.name for p in Path(path).glob("*.pt"))
            have = ", ".join(others) if others else "none"
            raise FileNotFoundError(
                f"{path} has no {self.checkpoint_name} (checkpoints there: {have}); pick one "
                "with checkpoint_name (oasr convert --checkpoint-name)"
            )
        return ckpt

    # -- config -------------------------------------------------------------------------------
    def build_config(self, path: Path) -> ConformerConfig:
        path = Path(path)
        cfg = read_train_yaml(path)
        if not cfg or cfg.get("encoder") != "conformer":
            raise ValueError(f"{path}/{CONFIG_NAME} is not a WeNet conformer config")
        problems: list[str] = []
        enc = dict(cfg.get("encoder_conf") or {})
        dec_type = cfg.get("decoder", "bitransformer")
        dec = dict(cfg.get("decoder_conf") or {})
        _check_options("encoder_conf", enc, _ENCODER_FIXED, problems)
        if dec_type not in ("transformer", "bitransformer"):
            problems.append(f"decoder={dec_type!r} (supported: 'transformer', 'bitransformer')")
        else:
            _check_options("decoder_conf", dec, _DECODER_FIXED, problems)
        if cfg.get("model", "asr_model") != "asr_model":
            problems.append(f"model={cfg.get('model')!r} (supported: 'asr_model')")
        for key in ("input_dim", "output_dim"):
            if not isinstance(cfg.get(key), int):
                problems.append(f"{key} is missing")
        fbank_bins = self._check_frontend(cfg, problems)
        if problems:
            raise ValueError(f"{path}/{CONFIG_NAME}: unsupported WeNet options: "
                             + "; ".join(problems))
        if fbank_bins != cfg["input_dim"]:
            raise ValueError(f"{path}/{CONFIG_NAME}: fbank num_mel_bins={fbank_bins} but "
                             f"input_dim={cfg['input_dim']}")

        vocab = int(cfg["output_dim"])
        blank, sos, eos = self._special_ids(path, cfg, vocab)
        model_conf = cfg.get("model_conf") or {}
        bidirectional = dec_type == "bitransformer"
        config = ConformerConfig(
            input_dim=int(cfg["input_dim"]),
            vocab_size=vocab,
            d_model=int(enc.get("output_size", 256)),
            encoder_layers=int(enc.get("num_blocks", 6)),
            encoder_heads=int(enc.get("attention_heads", 4)),
            encoder_linear_units=int(enc.get("linear_units", 2048)),
            input_layer=str(enc.get("input_layer", "conv2d")),
            cnn_module_kernel=int(enc.get("cnn_module_kernel", 15)),
            cnn_module_norm=str(enc.get("cnn_module_norm", "batch_norm")),
            causal=bool(enc.get("causal", False)),
            use_cnn_module=bool(enc.get("use_cnn_module", True)),
            macaron_style=bool(enc.get("macaron_style", True)),
            activation=str(enc.get("activation_type", "swish")),
            conv_bias=bool(enc.get("conv_bias", True)),
            norm_eps=float(enc.get("norm_eps", 1e-5)),
            conv_norm_eps=float(enc.get("conv_norm_eps", 1e-5)),
            global_cmvn=self._has_global_cmvn(cfg),
            static_chunk_size=int(enc.get("static_chunk_size", 0)),
            use_dynamic_chunk=bool(enc.get("use_dynamic_chunk", False)),
            decoder=dec_type,
            decoder_layers=int(dec.get("num_blocks", 6)),
            r_decoder_layers=int(dec.get("r_num_blocks", 0)) if bidirectional else 0,
            decoder_heads=int(dec.get("attention_heads", 4)),
            decoder_linear_units=int(dec.get("linear_units", 2048)),
            decoder_activation=str(dec.get("activation_type", "relu")),
            blank_id=blank,
            sos_id=sos,
            eos_id=eos,
            reverse_weight=float(model_conf.get("reverse_weight", 0.0)) if bidirectional else 0.0,
        )
        if float(dec.get("norm_eps", config.norm_eps)) != config.norm_eps:
            raise ValueError(f"{path}/{CONFIG_NAME}: decoder_conf.norm_eps differs from the "
                             "encoder's; one LayerNorm eps is supported")
        return config

    @staticmethod
    def _check_frontend(cfg: dict[str, Any], problems: list[str]) -> int:
        """The fbank bins the model reads; frontends other than 16 kHz 25/10 ms fbank are
        problems."""
        data = cfg.get("dataset_conf") or {}
        for other in ("mfcc_conf", "log_mel_spectrogram_conf"):
            if other in data and "fbank_conf" not in data:
                problems.append(f"dataset_conf.{other} (only fbank features are supported)")
        fbank = data.get("fbank_conf") or {}
        shift, length = fbank.get("frame_shift", FRAME_SHIFT_MS), fbank.get(
            "frame_length", FRAME_LENGTH_MS)
        if (shift, length) != (FRAME_SHIFT_MS, FRAME_LENGTH_MS):
            problems.append(f"fbank frame_shift/frame_length {shift}/{length} ms (supported: "
                            f"{FRAME_SHIFT_MS}/{FRAME_LENGTH_MS})")
        window = fbank.get("window_type", "povey")  # WeNet's compute_fbank default
        if window != "povey":
            problems.append(f"fbank window_type={window!r} (supported: 'povey')")
        rate = (data.get("resample_conf") or {}).get("resample_rate", SAMPLE_RATE)
        if rate != SAMPLE_RATE:
            problems.append(f"resample_rate={rate} (supported: {SAMPLE_RATE})")
        return int(fbank.get("num_mel_bins", cfg.get("input_dim") or 0))

    @staticmethod
    def _has_global_cmvn(cfg: dict[str, Any]) -> bool:
        # Current WeNet: ``cmvn: global_cmvn`` + ``cmvn_conf``; before 3.0: top-level cmvn_file.
        if "cmvn" in cfg:
            return cfg.get("cmvn") == "global_cmvn"
        return cfg.get("cmvn_file") is not None

    def _special_ids(self, path: Path, cfg: dict[str, Any], vocab: int) -> tuple[int, int, int]:
        """(blank, sos, eos) by WeNet's rule, checked against the symbol table."""
        special = (cfg.get("tokenizer_conf") or {}).get("special_tokens") or {}
        sos = int(special.get("<sos>", vocab - 1))
        eos = int(special.get("<eos>", vocab - 1))
        blank = int((cfg.get("ctc_conf") or {}).get("ctc_blank_id", special.get("<blank>", 0)))
        units_path = _units_file(path)
        assert units_path is not None
        table = {unit: i for i, unit in read_symbol_table(units_path).items()}
        expected = {"<blank>": (blank,), "<sos/eos>": (sos, eos), "<sos>": (sos,),
                    "<eos>": (eos,)}
        for symbol, ids in expected.items():
            if symbol in table and any(table[symbol] != i for i in ids):
                raise ValueError(
                    f"{units_path}: {symbol} is id {table[symbol]} but the model uses "
                    f"{'/'.join(str(i) for i in ids)} (train.yaml special_tokens / ctc_conf, or "
                    f"WeNet's default vocab_size - 1 = {vocab - 1})"
                )
        beyond = sorted(i for i in table.values() if not 0 <= i < vocab)
        if beyond:
            raise ValueError(f"{units_path} has ids outside output_dim={vocab}: {beyond[:5]}")
        return blank, sos, eos

    # -- weights ------------------------------------------------------------------------------
    def expected_shapes(self, config: ConformerConfig) -> dict[str, tuple[int, ...]]:
        return config.parameter_shapes()

    def map_weights(self, path: Path, config: ConformerConfig) -> MappedWeights:
        path = Path(path)
        ckpt = self.checkpoint_path(path)
        raw = load_torch_checkpoint(ckpt)
        if not isinstance(raw, dict) or not all(isinstance(v, torch.Tensor) for v in raw.values()):
            raise ValueError(f"{ckpt} does not hold a state dict of tensors")
        out, _ = _wenet_keys(config.global_cmvn).apply(raw)
        if config.global_cmvn and "encoder.global_cmvn.mean" not in out.tensors:
            self._cmvn_from_file(path, out)
        return out

    @staticmethod
    def _cmvn_from_file(path: Path, out: MappedWeights) -> None:
        """The CMVN stats file named in train.yaml, for a checkpoint without the buffers."""
        cfg = read_train_yaml(path) or {}
        conf = cfg.get("cmvn_conf") or {}
        name = conf.get("cmvn_file", cfg.get("cmvn_file"))
        if not name:
            return
        candidates = [Path(name), path / name, path / Path(name).name]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            return  # the load report names the missing buffers
        try:
            from oasr.features.cmvn import load_global_cmvn
        except ImportError as exc:
            raise ImportError(
                f"reading the global CMVN stats {found} needs oasr.features.cmvn, which failed "
                f"to import ({exc}); reinstall oasr with its dependencies (numpy, torch)"
            ) from exc
        mean, istd = load_global_cmvn(found)
        out.put("encoder.global_cmvn.mean", torch.as_tensor(mean, dtype=torch.float32),
                str(found))
        out.put("encoder.global_cmvn.istd", torch.as_tensor(istd, dtype=torch.float32),
                str(found))

    # -- bundle metadata ----------------------------------------------------------------------
    def build_feature_config(self, config: ConformerConfig) -> FeatureConfig:
        # WeNet's Kaldi fbank reads int16-scaled samples; decoding runs without dither.
        return FeatureConfig(
            feature_type="fbank",
            sample_rate=SAMPLE_RATE,
            num_mel_bins=config.input_dim,
            frame_shift_ms=FRAME_SHIFT_MS,
            frame_length_ms=FRAME_LENGTH_MS,
            params={"audio_scale": 32768.0, "dither": 0.0},
        )

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        units = _units_file(Path(path))
        if units is None:
            raise FileNotFoundError(f"{path} has no symbol table ({' or '.join(UNITS_NAMES)})")
        # WeNet's tokenizers join the units' text as they are: <unk> prints as "<unk>".
        return TokenizerSpec(kind="symbol_table", files={"units": units.name},
                             options={"literal_units": ["<unk>"]})

    def build_decoding_defaults(self, config: ConformerConfig, path: Path) -> dict[str, Any]:
        return {"rescoring_reverse_weight": config.reverse_weight}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.architecture}/{self.source_format}, "
                f"{self.checkpoint_name})")
