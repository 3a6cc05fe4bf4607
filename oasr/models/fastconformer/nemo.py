"""NVIDIA NeMo checkpoints -> FastConformer: a ``.nemo`` tar (or its extracted folder) holding
``model_config.yaml``, ``model_weights.ckpt`` and the SentencePiece ``tokenizer.model``.

The head comes from the config: a ``decoder.prednet`` makes a transducer, TDT when the loss
is ``tdt`` (durations from ``model_defaults.tdt_durations``), CTC otherwise. NeMo's blank is
the last unit, ``len(labels)``. Weights are renamed NeMo -> transformers -> ours, so one
``WeightMap`` (``converters.hf_renames``) names our parameters; options this encoder does not
implement (another subsampling, attention, or a causal conv) are refused by name.

A ``.nemo`` file is untrusted input: its config is read from the archive without unpacking, and
only the three members a conversion needs are streamed to a temporary folder, each under a cap
(config 16 MiB, tokenizer 64 MiB, weights and the total ``OASR_NEMO_MAX_BYTES``, 16 GiB by
default); links, devices and names outside the folder refuse the archive
(``oasr.models.archive``).
"""

from __future__ import annotations

import atexit
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from oasr import envs
from oasr.features.spec import FeatureConfig
from oasr.models.archive import ArchiveLimits, extract_members, member_names, read_member
from oasr.models.converter import (
    BaseCheckpointConverter,
    CorruptCheckpointFileError,
    MappedWeights,
    parse_yaml,
    read_yaml,
)
from oasr.models.fastconformer.config import FastConformerConfig
from oasr.models.fastconformer.converters import (
    _subsampling_indices,
    expected_shapes,
    hf_renames,
    parakeet_logmel_features,
)
from oasr.models.safe_load import load_torch_checkpoint
from oasr.models.weight_map import Rule, WeightMap, keep_unmatched
from oasr.tokenizers.base import TokenizerSpec

__all__ = ["NemoCtcConverter", "NemoRnntConverter", "NemoTdtConverter", "read_nemo",
           "release_nemo"]

CONFIG_NAME = "model_config.yaml"
WEIGHTS_NAME = "model_weights.ckpt"

# NeMo's module names -> transformers' (applied in order, by prefix or infix).
_NEMO_TO_HF = (
    ("encoder.pre_encode.conv.", "encoder.subsampling.layers."),
    ("encoder.pre_encode.out.", "encoder.subsampling.linear."),
    (".conv.batch_norm.", ".conv.norm."),
    ("decoder.decoder_layers.0.", "ctc_head."),
    ("decoder.prediction.embed.", "decoder.embedding."),
    ("decoder.prediction.dec_rnn.lstm.", "decoder.lstm."),
    ("joint.enc.", "encoder_projector."),
    ("joint.pred.", "decoder.decoder_projector."),
    ("joint.joint_net.2.", "joint.head."),
    (".self_attn.linear_q.", ".self_attn.q_proj."),
    (".self_attn.linear_k.", ".self_attn.k_proj."),
    (".self_attn.linear_v.", ".self_attn.v_proj."),
    (".self_attn.linear_out.", ".self_attn.o_proj."),
    (".self_attn.linear_pos.", ".self_attn.relative_k_proj."),
    (".self_attn.pos_bias_u", ".self_attn.bias_u"),
    (".self_attn.pos_bias_v", ".self_attn.bias_v"),
)
# NeMo keys no parameter of ours stands for (matched before the NeMo -> transformers renaming).
_NEMO_DROPS = WeightMap(
    Rule(r"preprocessor\..*", reason="frontend buffers (the frontend is parakeet_logmel)"),
    Rule(r".*num_batches_tracked", reason="BatchNorm training counter"),
    Rule(r".*\.pe|encoder\.pos_enc\..*", reason="sinusoid table (recomputed)"),
)
# encoder options: (NeMo's default, accepted values)
_ENCODER_FIXED: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "subsampling": ("dw_striding", ("dw_striding",)),
    "self_attention_model": ("rel_pos", ("rel_pos",)),
    "conv_norm_type": ("batch_norm", ("batch_norm",)),
    "causal_downsampling": (False, (False,)),
    "untie_biases": (True, (True,)),
    "reduction": (None, (None,)),
}


def _nemo_to_hf(name: str) -> str:
    for old, new in _NEMO_TO_HF:
        name = name.replace(old, new)
    return name


# Members read from a .nemo and the most each may hold: the config and the tokenizer are
# small; the weights (and all members together) are capped by OASR_NEMO_MAX_BYTES.
CONFIG_MAX_BYTES = 16 << 20
TOKENIZER_MAX_BYTES = 64 << 20
_RAISE_CAP = ("set OASR_NEMO_MAX_BYTES (e.g. OASR_NEMO_MAX_BYTES=32G) to accept a larger model, "
              "or convert the extracted folder")


def _is_tokenizer(name: str) -> bool:
    return name.endswith("tokenizer.model")


def _member_cap(name: str) -> int | None:
    if name == CONFIG_NAME:
        return CONFIG_MAX_BYTES
    if name == WEIGHTS_NAME:
        return envs.nemo_max_bytes()
    if _is_tokenizer(name):
        return TOKENIZER_MAX_BYTES
    return None  # not needed: never written


def _key(path: Path) -> tuple[Path, int, int]:
    st = path.stat()
    return path.resolve(), st.st_size, st.st_mtime_ns


def read_nemo(path: Path) -> Path:
    """The folder holding the checkpoint's files: ``path`` itself, or the members a ``.nemo``
    tar needs (config, weights, tokenizer), streamed into a temporary folder once per process
    (see ``oasr.models.archive`` for what is refused) and removed at exit or by
    ``release_nemo``."""
    path = Path(path)
    if path.is_dir():
        return path
    key = _key(path)
    cached = _EXTRACTED.get(key)
    if cached is not None and cached.is_dir():
        return cached
    out = Path(tempfile.mkdtemp(prefix="oasr-nemo-"))
    try:
        extract_members(path, out, ArchiveLimits(_member_cap, envs.nemo_max_bytes(), _RAISE_CAP))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    _EXTRACTED[key] = out
    return out


def release_nemo(path: Path) -> None:
    """Remove the temporary folder ``read_nemo`` unpacked ``path`` into (if any)."""
    path = Path(path)
    if path.is_dir():
        return
    for key in [k for k in _EXTRACTED if k[0] == path.resolve()]:
        shutil.rmtree(_EXTRACTED.pop(key), ignore_errors=True)


def _member_label(file: Path) -> str:
    """``file`` as the user knows it: ``X.nemo (member NAME)`` for an unpacked member."""
    for key, folder in _EXTRACTED.items():
        if file.parent == folder:
            return f"{key[0]} (member {file.name})"
    return str(file)


@atexit.register
def _remove_extracted() -> None:
    for folder in _EXTRACTED.values():
        shutil.rmtree(folder, ignore_errors=True)
    _EXTRACTED.clear()


_EXTRACTED: dict[tuple[Path, int, int], Path] = {}
_NAMES: dict[tuple[Path, int, int], frozenset[str]] = {}
_CONFIGS: dict[tuple[Path, int, int], dict[str, Any]] = {}


def _looks_like_nemo(path: Path) -> bool:
    path = Path(path)
    if path.is_dir():
        return (path / CONFIG_NAME).is_file() and (path / WEIGHTS_NAME).is_file()
    if not (path.is_file() and path.suffix == ".nemo" and tarfile.is_tarfile(path)):
        return False
    key = _key(path)
    if key not in _NAMES:  # every NeMo converter asks; the archive is read once
        _NAMES[key] = frozenset(member_names(path))
    return {CONFIG_NAME, WEIGHTS_NAME} <= _NAMES[key]


def _config(path: Path) -> dict[str, Any]:
    """The model config of a .nemo tar (read from the archive, nothing unpacked) or folder."""
    path = Path(path)
    if path.is_dir():
        data = read_yaml(path / CONFIG_NAME)
        if data is None:
            raise CorruptCheckpointFileError(f"{path} has no {CONFIG_NAME}")
        return data
    key = _key(path)
    if key not in _CONFIGS:  # every NeMo converter asks; the member is read once
        raw = read_member(path, CONFIG_NAME, CONFIG_MAX_BYTES)
        if raw is None:
            raise CorruptCheckpointFileError(f"{path} has no {CONFIG_NAME}")
        _CONFIGS[key] = parse_yaml(raw, path / CONFIG_NAME)
    return _CONFIGS[key]


def nemo_head(cfg: dict[str, Any]) -> str:
    """``ctc``, ``rnnt`` or ``tdt`` from a NeMo model config."""
    if "prednet" not in (cfg.get("decoder") or {}):
        return "ctc"
    loss = (cfg.get("loss") or {}).get("loss_name")
    return "tdt" if loss == "tdt" or "tdt_durations" in (cfg.get("model_defaults") or {}) \
        else "rnnt"


class _NemoConverter(BaseCheckpointConverter):
    source_format = "nemo"
    detect_specificity = 20
    reads_files = True
    config_class = "oasr.models.fastconformer.config:FastConformerConfig"
    head = ""

    @property
    def looks_for(self) -> str:  # type: ignore[override]
        return (f"a .nemo tar (or its folder) with {CONFIG_NAME} and {WEIGHTS_NAME} of a "
                f"FastConformer {self.head.upper()} model")

    def detect(self, path: Path) -> bool:
        if not _looks_like_nemo(path):
            return False
        cfg = _config(path)
        return "encoder" in cfg and nemo_head(cfg) == self.head

    def build_config(self, path: Path) -> FastConformerConfig:
        cfg = _config(path)
        if nemo_head(cfg) != self.head:
            raise ValueError(f"{path} is a NeMo {nemo_head(cfg)} model, not {self.head}")
        enc = dict(cfg.get("encoder") or {})
        problems = [f"encoder.{k}={enc.get(k, d)!r} (supported: {acc})"
                    for k, (d, acc) in _ENCODER_FIXED.items() if enc.get(k, d) not in acc]
        context = enc.get("att_context_size")
        if context not in (None, [-1, -1]):
            problems.append(f"encoder.att_context_size={context} (limited-context attention "
                            "is not implemented offline)")
        if problems:
            raise ValueError(f"{path}: unsupported NeMo options: " + "; ".join(problems))
        labels = list(cfg.get("labels") or (cfg.get("decoder") or {}).get("vocabulary") or [])
        if not labels:
            raise ValueError(f"{path}/{CONFIG_NAME} has no labels (decoder.vocabulary)")
        d_model = int(enc.get("d_model", 1024))
        pred = (cfg.get("decoder") or {}).get("prednet") or {}
        joint = (cfg.get("joint") or {}).get("jointnet") or {}
        if self.head != "ctc" and joint.get("joint_hidden", pred.get("pred_hidden")) != \
                pred.get("pred_hidden"):
            raise ValueError(f"{path}: joint_hidden != pred_hidden is not implemented")
        use_bias = bool(enc.get("use_bias", True))
        return FastConformerConfig(
            num_mel_bins=int(enc.get("feat_in", 80)),
            d_model=d_model,
            layers=int(enc.get("n_layers", 17)),
            heads=int(enc.get("n_heads", 8)),
            ff_dim=int(d_model * enc.get("ff_expansion_factor", 4)),
            conv_kernel=int(enc.get("conv_kernel_size", 9)),
            subsampling_factor=int(enc.get("subsampling_factor", 8)),
            subsampling_channels=int(enc.get("subsampling_conv_channels", 256)),
            xscale=bool(enc.get("xscaling", True)),
            attention_bias=use_bias,
            conv_bias=use_bias,
            head=self.head,
            vocab_size=len(labels) + 1,
            blank_id=len(labels),
            pred_hidden=int(pred.get("pred_hidden", 640)),
            pred_layers=int(pred.get("pred_rnn_layers", 2)),
            joint_activation=str(joint.get("activation", "relu")),
            max_symbols_per_step=int(((cfg.get("decoding") or {}).get("greedy") or {})
                                     .get("max_symbols", 10) or 10),
            durations=list((cfg.get("model_defaults") or {}).get("tdt_durations")
                           or [0, 1, 2, 3, 4]),
        )

    def expected_shapes(self, config: FastConformerConfig) -> dict[str, tuple[int, ...]]:
        return expected_shapes(config)

    def map_weights(self, path: Path, config: FastConformerConfig) -> MappedWeights:
        ckpt = read_nemo(path) / WEIGHTS_NAME
        raw = load_torch_checkpoint(ckpt, name=_member_label(ckpt))
        if not isinstance(raw, dict):
            raise CorruptCheckpointFileError(f"{_member_label(ckpt)} does not hold a state dict")
        out, rest = _NEMO_DROPS.apply(raw)
        rest_raw = {name: raw[name] for name in rest}
        renamed = hf_renames(_subsampling_indices(config), self.head)
        return keep_unmatched(rest_raw, *renamed.apply(rest_raw, out, translate=_nemo_to_hf))

    def build_feature_config(self, config: FastConformerConfig) -> FeatureConfig:
        pre = getattr(self, "_pre", None) or {}
        sr = int(pre.get("sample_rate", 16000))
        return parakeet_logmel_features(config.num_mel_bins, {
            "sampling_rate": sr, "feature_size": int(pre.get("features", config.num_mel_bins)),
            "hop_length": round(float(pre.get("window_stride", 0.01)) * sr),
            "win_length": round(float(pre.get("window_size", 0.025)) * sr),
            "n_fft": int(pre.get("n_fft", 512)), "preemphasis": pre.get("preemphasis", 0.97),
        })

    def convert(self, src: str | Path, dst: str | Path, *args: Any, **kwargs: Any) -> Any:
        pre = dict(_config(Path(src)).get("preprocessor") or {})
        for key, want in (("normalize", "per_feature"), ("window", "hann"), ("log", True)):
            if pre.get(key, want) != want:
                raise ValueError(f"{src}: preprocessor.{key}={pre.get(key)!r} (supported: "
                                 f"{want!r})")
        self._pre = pre
        kwargs.setdefault("source_label", str(src))
        try:
            return super().convert(read_nemo(Path(src)), dst, *args, **kwargs)
        finally:
            release_nemo(Path(src))  # the bundle holds what was needed

    def build_decoding_defaults(self, config: FastConformerConfig, path: Path) -> dict[str, Any]:
        if self.head == "ctc":
            return {"beam_size": 1}
        return {"max_sym_per_frame": config.max_symbols_per_step} if self.head == "rnnt" else {}

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        folder = read_nemo(path)
        models = sorted(p.name for p in folder.glob("*tokenizer.model"))
        if not models:
            raise FileNotFoundError(f"{path} has no SentencePiece tokenizer.model")
        return TokenizerSpec(kind="sentencepiece", files={"model": models[0]})


class NemoCtcConverter(_NemoConverter):
    architecture = "parakeet_ctc"
    head = "ctc"


class NemoRnntConverter(_NemoConverter):
    architecture = "parakeet_rnnt"
    head = "rnnt"


class NemoTdtConverter(_NemoConverter):
    architecture = "parakeet_tdt"
    head = "tdt"
