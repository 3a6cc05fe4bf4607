"""``BaseCheckpointConverter``: one upstream checkpoint format -> our weights, config and bundle.

A converter declares its architecture and format and implements ``detect`` (positive markers
only), ``build_config`` and ``map_weights`` (upstream tensors -> ours, plus what it dropped and
why). The base adds what every format shares: the Hugging Face weight-loading chain, the load
report that refuses a checkpoint with missing weights, and ``convert`` into a native bundle.

Anything satisfying ``oasr.models.registry.CheckpointConverter`` is accepted by the registry;
inheriting from this class is optional.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from oasr.dtypes import dtype_from_name
from oasr.features.spec import FeatureConfig
from oasr.models.contained import contained_path
from oasr.models.safe_load import load_torch_checkpoint
from oasr.tokenizers.base import TokenizerSpec

__all__ = [
    "BaseCheckpointConverter",
    "CorruptCheckpointFileError",
    "IncompleteCheckpointError",
    "LoadReport",
    "MappedWeights",
    "load_hf_weights",
    "whisper_logmel_features",
]

HF_WEIGHT_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin")


class IncompleteCheckpointError(ValueError):
    """A checkpoint does not supply every weight the model needs (or supplies wrong shapes)."""


@dataclass
class MappedWeights:
    """What ``map_weights`` produces: our tensors, where each came from, what was left out."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)

    def put(self, key: str, tensor: torch.Tensor, source: str) -> None:
        """Record our ``key`` as ``tensor``, taken from upstream ``source``."""
        if key in self.tensors:
            raise ValueError(f"{key} is mapped twice (from {self.sources[key]} and {source})")
        self.tensors[key] = tensor
        self.sources[key] = source

    def drop(self, upstream: str, reason: str) -> None:
        self.dropped[upstream] = reason


@dataclass
class LoadReport:
    """How a checkpoint's keys met the model's.

    mapped: our key -> the upstream key (or slice) it came from.
    dropped: upstream key -> why it is not used.
    missing: our keys no upstream key supplied (refused).
    unexpected: keys produced that the model does not have (refused: a mapping bug).
    mismatched: our key -> (shape produced, shape expected) (refused).
    """

    architecture: str
    source_format: str
    mapped: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    # What the conversion assumed or chose that the checkpoint did not say (printed).
    notes: list[str] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        architecture: str,
        source_format: str,
        weights: MappedWeights,
        expected: dict[str, tuple[int, ...]],
    ) -> LoadReport:
        got = weights.tensors
        return cls(
            architecture=architecture,
            source_format=source_format,
            mapped=dict(weights.sources),
            dropped=dict(weights.dropped),
            missing=sorted(k for k in expected if k not in got),
            unexpected=sorted(k for k in got if k not in expected),
            mismatched={
                k: (tuple(got[k].shape), tuple(shape))
                for k, shape in expected.items()
                if k in got and tuple(got[k].shape) != tuple(shape)
            },
        )

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def check(self) -> None:
        """Raise ``IncompleteCheckpointError`` listing every refused key."""
        if self.ok:
            return
        lines = [f"refusing the {self.source_format} {self.architecture} checkpoint:"]
        if self.missing:
            lines.append(f"  {len(self.missing)} missing weight(s) the model needs:")
            lines += [f"    {k}" for k in self.missing]
        if self.mismatched:
            lines.append(f"  {len(self.mismatched)} weight(s) with the wrong shape:")
            lines += [f"    {k}: got {g}, expected {e}" for k, (g, e) in self.mismatched.items()]
        if self.unexpected:
            lines.append(f"  {len(self.unexpected)} mapped key(s) the model does not have:")
            lines += [f"    {k}" for k in self.unexpected]
        raise IncompleteCheckpointError("\n".join(lines))

    def __str__(self) -> str:
        head = (
            f"{self.architecture}/{self.source_format}: {len(self.mapped)} mapped, "
            f"{len(self.dropped)} dropped, {len(self.missing)} missing"
        )
        if self.unexpected or self.mismatched:
            head += f", {len(self.unexpected)} unexpected, {len(self.mismatched)} mismatched"
        reasons: dict[str, int] = {}
        for why in self.dropped.values():
            reasons[why] = reasons.get(why, 0) + 1
        lines = [head] + [f"  dropped {n} x {why}" for why, n in sorted(reasons.items())]
        lines += [f"  missing {k}" for k in self.missing]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def load_hf_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """A Hugging Face folder's weights: sharded safetensors, else model.safetensors, else
    pytorch_model.bin (unpickled with ``weights_only=True``).

    Raises:
        FileNotFoundError: none of those files is in ``folder``.
    """
    from safetensors.torch import load_file

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = (read_json(index) or {}).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CorruptCheckpointFileError(f"{index} has no weight_map object")
        out: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            out.update(load_file(str(contained_path(folder, shard, str(index)))))
        missing = sorted(set(weight_map) - set(out))
        if missing:
            raise FileNotFoundError(f"{index} lists tensors its shards lack: {missing[:5]}")
        return out
    single = folder / "model.safetensors"
    if single.is_file():
        return load_file(str(single))
    pickled = folder / "pytorch_model.bin"
    if pickled.is_file():
        state = load_torch_checkpoint(pickled)
        if not isinstance(state, dict):
            raise ValueError(f"{pickled} does not hold a state dict")
        return dict(state)
    raise FileNotFoundError(f"{folder} has none of the weight files {', '.join(HF_WEIGHT_FILES)}")


def has_hf_weights(folder: Path) -> bool:
    return any((folder / name).is_file() for name in HF_WEIGHT_FILES)


def whisper_logmel_features(n_mels: int) -> FeatureConfig:
    """Whisper's frontend: 16 kHz, 25 ms / 10 ms log-mel over a fixed 30 s window."""
    return FeatureConfig(
        "whisper_logmel",
        sample_rate=16000,
        num_mel_bins=n_mels,
        frame_shift_ms=10.0,
        frame_length_ms=25.0,
        params={"chunk_seconds": 30},
    )


class CorruptCheckpointFileError(ValueError):
    """A checkpoint file exists but cannot be read as what it must be (a config that does not
    parse); never read as absent, which would fall back to guessed defaults."""


# A config, token list or tokenizer.json larger than this is not one (refused before reading).
CONFIG_MAX_BYTES = 64 << 20


def _read_config_bytes(path: Path) -> bytes | None:
    if not path.is_file():
        return None
    size = path.stat().st_size
    if size > CONFIG_MAX_BYTES:
        raise CorruptCheckpointFileError(f"{path} holds {size} bytes, over the {CONFIG_MAX_BYTES} "
                                         "a config may take; it is not a checkpoint config")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CorruptCheckpointFileError(f"{path} cannot be read ({exc})") from exc


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or ``None`` when the file is absent.

    Raises:
        CorruptCheckpointFileError: the file exists but is unreadable, over
            ``CONFIG_MAX_BYTES``, is not JSON, or is not a JSON object; the message names it.
    """
    path = Path(path)
    raw = _read_config_bytes(path)
    return None if raw is None else _parse_mapping(raw, path, "JSON", json.loads, ValueError,
                                                   "an object")


def parse_yaml(raw: bytes, where: Path | str) -> dict[str, Any]:
    """A YAML mapping from ``raw`` with ``yaml.safe_load`` (plain data only: a ``!!python``
    tag is an error, never a constructor).

    Raises:
        CorruptCheckpointFileError: not UTF-8, not YAML, or not a mapping; names ``where``.
    """
    import yaml

    return _parse_mapping(raw, where, "YAML", yaml.safe_load, yaml.YAMLError, "a mapping")


def _parse_mapping(raw: bytes, where: Path | str, fmt: str, loads: Callable[[str], Any],
                   error: type[Exception], container: str) -> dict[str, Any]:
    try:
        data = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, error) as exc:
        reason = " ".join(str(exc).split())
        raise CorruptCheckpointFileError(f"{where} is not valid {fmt} ({reason}); repair or "
                                         "replace the file") from None
    if not isinstance(data, dict):
        raise CorruptCheckpointFileError(f"{where} holds a {fmt} {type(data).__name__}, not "
                                         f"{container}; repair or replace it")
    return data


def read_yaml(path: Path) -> dict[str, Any] | None:
    """A YAML mapping from ``path`` (``parse_yaml``), or ``None`` when the file is absent."""
    raw = _read_config_bytes(Path(path))
    return None if raw is None else parse_yaml(raw, path)


class BaseCheckpointConverter:
    """One checkpoint format of one architecture.

    Subclasses set the class attributes and implement ``detect``, ``build_config``,
    ``expected_shapes`` and ``map_weights``; ``build_feature_config`` and
    ``build_tokenizer_spec`` are needed for ``convert``.
    """

    architecture: str = ""
    source_format: str = ""
    default_checkpoint_name: str = ""
    detect_specificity: int = 0
    looks_for: str = ""
    # Whether a checkpoint of this format can be a single file (a .nemo tar), not a folder.
    reads_files: bool = False
    # "module:Class" of the config ``build_config`` returns; recorded in bundles.
    config_class: str = ""

    # -- what a format implements ------------------------------------------------------------
    def detect(self, path: Path) -> bool:
        """Whether ``path`` positively looks like this format (never by elimination)."""
        raise NotImplementedError

    def build_config(self, path: Path) -> Any:
        raise NotImplementedError

    def expected_shapes(self, config: Any) -> dict[str, tuple[int, ...]]:
        """Every key the model needs and its shape, for the load report."""
        raise NotImplementedError

    def map_weights(self, path: Path, config: Any) -> MappedWeights:
        """Upstream tensors -> ours (renamed, split, fused), recording what was dropped."""
        raise NotImplementedError

    # -- optional hooks ----------------------------------------------------------------------
    def build_decoding_defaults(self, config: Any, path: Path) -> dict[str, Any]:
        """Checkpoint defaults of decode-family options, by option name (applied where the
        family has the option, below the user's ``--decode-option``); none by default. The
        family itself is the model class's to declare (``decode_families``)."""
        return {}

    def build_tokenizer_spec(self, path: Path) -> TokenizerSpec:
        raise NotImplementedError(f"{type(self).__name__} does not declare a tokenizer")

    def build_feature_config(self, config: Any) -> FeatureConfig:
        raise NotImplementedError(f"{type(self).__name__} does not declare a feature frontend")

    def tokenizer_root(self, path: Path) -> Path:
        """The folder ``build_tokenizer_spec``'s file names are relative to: ``path`` unless
        the format keeps its tokenizer elsewhere (icefall: ``data/lang_*`` beside ``exp/``)."""
        return Path(path)

    def conversion_notes(self, path: Path, config: Any) -> list[str]:
        """What the conversion assumed that the checkpoint did not say (the report prints
        them); none by default."""
        return []

    # -- provided ----------------------------------------------------------------------------
    def load_checked(self, path: Path, config: Any) -> tuple[dict[str, torch.Tensor], LoadReport]:
        """Map the weights and build the report; raises if any key is refused."""
        weights = self.map_weights(Path(path), config)
        report = LoadReport.build(
            self.architecture, self.source_format, weights, self.expected_shapes(config)
        )
        report.check()
        return weights.tensors, report

    def load_state_dict(self, path: Path, config: Any) -> dict[str, torch.Tensor]:
        return self.load_checked(path, config)[0]

    def convert(
        self,
        src: str | Path,
        dst: str | Path,
        dtype: torch.dtype | str | None = None,
        overwrite: bool = False,
        source_label: str | None = None,
    ) -> LoadReport:
        """Convert the checkpoint at ``src`` into a native bundle at ``dst`` (atomically).

        Args:
            dtype: cast floating-point weights to this dtype (default: keep the source's).
            overwrite: replace an existing bundle at ``dst`` (a non-bundle folder is never
                replaced).
            source_label: what to record as the source in the provenance (default: ``src``),
                e.g. the package name or Hub id the folder was resolved from.

        Raises:
            IncompleteCheckpointError: the checkpoint lacks weights the model needs.
        """
        from oasr.models.bundle import write_bundle

        src = Path(src)
        config = self.build_config(src)
        tensors, report = self.load_checked(src, config)
        if dtype is not None:
            target = _as_dtype(dtype)
            tensors = {k: t.to(target) if t.is_floating_point() else t for k, t in tensors.items()}
        write_bundle(
            dst,
            architecture=self.architecture,
            model_config=config,
            model_config_class=self.config_class,
            state_dict=tensors,
            feature_config=self.build_feature_config(config),
            tokenizer_spec=self.build_tokenizer_spec(src),
            tokenizer_src=self.tokenizer_root(src),
            decoding_defaults=self.build_decoding_defaults(config, src),
            source=source_label or str(src),
            source_format=self.source_format,
            overwrite=overwrite,
        )
        report.notes += self.conversion_notes(src, config)
        return report

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.architecture}/{self.source_format})"


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    return dtype_from_name(dtype)
