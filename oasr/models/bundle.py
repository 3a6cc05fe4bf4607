"""The native bundle: a converted checkpoint that loads with no detection and no conversion.

Layout::

    <bundle>/
      oasr_config.json    format_version, architecture, model_config (+ its class),
                          feature_config, tokenizer_spec, decoding_defaults, quantization,
                          provenance {source, source_format, weights_sha256, oasr_version,
                          created}
      model.safetensors   our state dict
      tokenizer/          the files tokenizer_spec names

``write_bundle`` builds the folder beside its destination and renames it into place, so a
failure part-way leaves no destination behind (and an existing bundle intact).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from oasr.features.spec import FeatureConfig
from oasr.models.contained import contained_path, is_contained_name
from oasr.tokenizers.base import TokenizerSpec

# 2: a pre-quantized bundle (``quantization`` set, oasr.quantization.checkpoint); a float
# bundle is still written as 1, so older readers keep reading it.
FORMAT_VERSION = 2
CONFIG_NAME = "oasr_config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_DIR = "tokenizer"

__all__ = [
    "FORMAT_VERSION",
    "Bundle",
    "BundleError",
    "BundleRecord",
    "is_bundle",
    "read_bundle",
    "write_bundle",
]


class BundleError(ValueError):
    """A folder is not a readable bundle, or a bundle cannot be written where asked."""


def is_bundle(path: str | Path) -> bool:
    return (Path(path) / CONFIG_NAME).is_file()


@dataclass(frozen=True)
class BundleRecord:
    """What a bundle's config records beside its weights and tokenizer files: the model, its
    front end, tokenizer and decoding defaults, where the weights came from, and their
    quantization (None: as converted)."""

    architecture: str
    model_config: Any  # a config with to_dict(), a dataclass, or a JSON-safe dict
    model_config_class: str
    feature_config: FeatureConfig
    tokenizer_spec: TokenizerSpec
    decoding_defaults: dict[str, Any]
    source: str
    source_format: str
    quantization: dict[str, Any] | None = None


@dataclass(frozen=True)
class Bundle:
    """A bundle read from disk; tensors load on ``load_state_dict``."""

    path: Path
    format_version: int
    architecture: str
    model_config: dict[str, Any]
    model_config_class: str
    feature_config: dict[str, Any]
    tokenizer_spec: TokenizerSpec
    decoding_defaults: dict[str, Any]
    quantization: dict[str, Any] | None
    provenance: dict[str, Any]

    def record(self) -> BundleRecord:
        """This bundle's record, to write it again (new weights, another dtype or
        quantization): the weights still come from the checkpoint it was converted from."""
        prov = self.provenance
        return BundleRecord(
            architecture=self.architecture, model_config=self.model_config,
            model_config_class=self.model_config_class,
            feature_config=self.build_feature_config(), tokenizer_spec=self.tokenizer_spec,
            decoding_defaults=self.decoding_defaults,
            source=str(prov.get("source", self.path)),
            source_format=str(prov.get("source_format", "native")),
            quantization=self.quantization)

    @property
    def weights_path(self) -> Path:
        return self.path / WEIGHTS_NAME

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER_DIR

    def load_state_dict(self, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        return load_file(str(self.weights_path), device=str(device))

    def build_model_config(self) -> Any:
        """The typed model config: the architecture's config class (found through the model
        registry, never imported by the recorded name) ``.from_dict(model_config)``."""
        from oasr.models.registry import ConfigClassError, UnknownNameError, model_config_class

        cfg_path = self.path / CONFIG_NAME
        try:
            cls = model_config_class(self.architecture, self.model_config_class)
        except (ConfigClassError, UnknownNameError) as exc:
            raise BundleError(f"{cfg_path}: {exc}; convert the checkpoint again") from None
        try:
            return cls.from_dict(self.model_config)
        except (TypeError, ValueError, KeyError) as exc:
            raise BundleError(f"{cfg_path}: model_config does not build a {cls.__name__} "
                              f"({exc}); convert the checkpoint again") from None

    def build_feature_config(self) -> FeatureConfig:
        try:
            return FeatureConfig(**self.feature_config)
        except (TypeError, ValueError) as exc:
            raise BundleError(f"{self.path / CONFIG_NAME}: feature_config is not a frontend "
                              f"config ({exc}); convert the checkpoint again") from None

    def verify(self) -> None:
        """Check the weights against the recorded sha256."""
        want = self.provenance.get("weights_sha256")
        got = _sha256(self.weights_path)
        if want != got:
            raise BundleError(
                f"{self.weights_path} does not match its recorded sha256 ({got} != {want}); "
                "the bundle was modified or damaged: convert it again"
            )


def read_bundle(path: str | Path) -> Bundle:
    """Read a bundle's config (tensors stay on disk until ``load_state_dict``).

    Raises:
        BundleError: no oasr_config.json, a newer format version, or missing fields.
    """
    path = Path(path)
    cfg_path = path / CONFIG_NAME
    if not cfg_path.is_file():
        raise BundleError(f"{path} is not an oasr bundle (no {CONFIG_NAME})")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise BundleError(f"{cfg_path} is not valid JSON: {e}") from None
    version = cfg.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise BundleError(f"{cfg_path}: format_version {version!r} is not a bundle version")
    if version > FORMAT_VERSION:
        raise BundleError(
            f"{cfg_path}: bundle format {version} was written by a newer oasr (this one reads "
            f"up to {FORMAT_VERSION}); upgrade oasr or convert again"
        )
    required = ("architecture", "model_config", "feature_config", "tokenizer_spec",
                "decoding_defaults", "provenance")
    absent = [k for k in required if k not in cfg]
    if absent:
        raise BundleError(f"{cfg_path} lacks {', '.join(absent)}")
    if not (path / WEIGHTS_NAME).is_file():
        raise BundleError(f"{path} lacks {WEIGHTS_NAME}")
    _check_fields(cfg_path, cfg)
    return Bundle(
        path=path,
        format_version=version,
        architecture=cfg["architecture"],
        model_config=cfg["model_config"],
        model_config_class=cfg.get("model_config_class") or "",
        feature_config=cfg["feature_config"],
        tokenizer_spec=TokenizerSpec(**cfg["tokenizer_spec"]),
        decoding_defaults=cfg["decoding_defaults"],
        quantization=cfg.get("quantization"),
        provenance=cfg["provenance"],
    )


def _check_fields(cfg_path: Path, cfg: dict[str, Any]) -> None:
    """Every name in the config that picks code or a file must be one we registered or one
    inside the bundle; refused naming the field (the config is data: it never names a module
    to import)."""
    from oasr.features import EXTRACTORS
    from oasr.models.registry import MODEL_REGISTRY, declared_config_classes
    from oasr.tokenizers import TOKENIZERS

    def refuse(what: str) -> BundleError:
        return BundleError(f"{cfg_path}: {what}; convert the checkpoint again")

    for key in ("model_config", "feature_config", "tokenizer_spec", "decoding_defaults",
                "provenance"):
        if not isinstance(cfg[key], dict):
            raise refuse(f"{key} is a {type(cfg[key]).__name__}, not an object")
    if not isinstance(cfg.get("quantization"), (dict, type(None))):
        raise refuse("quantization is neither an object nor null")
    arch = cfg["architecture"]
    if not isinstance(arch, str) or arch not in MODEL_REGISTRY:
        raise refuse(f"architecture {arch!r} is not registered (registered: "
                     f"{', '.join(MODEL_REGISTRY.names())}; a plugin's must be installed)")
    recorded = cfg.get("model_config_class") or ""
    declared = declared_config_classes(arch)
    if recorded not in (*declared, ""):
        raise refuse(f"model_config_class {recorded!r} is not the {arch} config class "
                     f"({' or '.join(declared) or 'none declared'}); a bundle cannot name code "
                     "to import")
    spec = cfg["tokenizer_spec"]
    if set(spec) - {"kind", "files", "options"} or not isinstance(spec.get("kind"), str):
        raise refuse("tokenizer_spec must hold a kind (and files, options) only")
    if spec["kind"] not in TOKENIZERS:
        raise refuse(f"tokenizer kind {spec['kind']!r} is not registered (registered: "
                     f"{', '.join(TOKENIZERS.names())})")
    files = spec.get("files", {})
    if not isinstance(files, dict) or not isinstance(spec.get("options", {}), dict):
        raise refuse("tokenizer_spec files and options must be objects")
    outside = [f for f in files.values() if not is_contained_name(f)]
    if outside:
        raise refuse(f"tokenizer_spec names {outside[0]!r}, not a file inside {TOKENIZER_DIR}/")
    feature_type = cfg["feature_config"].get("feature_type")
    if not isinstance(feature_type, str) or feature_type not in EXTRACTORS:
        raise refuse(f"feature_type {feature_type!r} is not a registered frontend (registered: "
                     f"{', '.join(EXTRACTORS.names())})")


def write_bundle(dst: str | Path, record: BundleRecord, state_dict: dict[str, torch.Tensor],
                 tokenizer_src: str | Path, *, overwrite: bool = False) -> Path:
    """Write a bundle of ``record`` and ``state_dict`` at ``dst`` atomically.

    Args:
        tokenizer_src: the folder ``tokenizer_spec.files`` are copied from (same relative
            names; they land in ``dst/tokenizer/``).

    Raises:
        BundleError: ``dst`` is a file or a non-empty folder that is not a bundle, or an
            existing bundle and ``overwrite`` is off.
        FileNotFoundError: a tokenizer file is missing from ``tokenizer_src``.
    """
    from oasr.models.registry import declared_config_classes

    declared = declared_config_classes(record.architecture)
    if record.model_config_class not in declared:
        raise BundleError(f"{record.model_config_class!r} is not the {record.architecture} "
                          f"config class "
                          f"({' or '.join(declared) or 'none declared'}); a bundle records the "
                          "class its architecture's converter declares")
    dst = Path(dst).absolute()
    _check_destination(dst, overwrite)
    dst.parent.mkdir(parents=True, exist_ok=True)
    # a name of its own: two writers of one destination (threads or processes) never share it
    # (mkdir, not mkdtemp: the bundle keeps the umask's mode, not 0700)
    tmp = dst.parent / f"{dst.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    try:
        tmp.mkdir()
        _save_tensors(state_dict, tmp / WEIGHTS_NAME)
        tok_dir = tmp / TOKENIZER_DIR
        tok_dir.mkdir()
        for rel in record.tokenizer_spec.files.values():
            target = contained_path(tok_dir, rel, "tokenizer_spec")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(contained_path(Path(tokenizer_src), rel, "tokenizer_spec"), target)
        config = {
            "format_version": FORMAT_VERSION if record.quantization else 1,
            "architecture": record.architecture,
            "model_config_class": record.model_config_class,
            "model_config": _config_dict(record.model_config),
            # every option written out: later default changes never move a bundle's features
            "feature_config": dataclasses.asdict(record.feature_config.complete()),
            "tokenizer_spec": dataclasses.asdict(record.tokenizer_spec),
            "decoding_defaults": record.decoding_defaults,
            "quantization": record.quantization,
            "provenance": {
                "source": record.source,
                "source_format": record.source_format,
                "weights_sha256": _sha256(tmp / WEIGHTS_NAME),
                "oasr_version": _oasr_version(),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            },
        }
        # The config goes last: its presence is what marks a folder as a bundle.
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if overwrite:
            _swap_into_place(tmp, dst)
        else:
            _rename_into_place(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dst


def _check_destination(dst: Path, overwrite: bool) -> None:
    if not dst.exists():
        return
    if not dst.is_dir():
        raise BundleError(f"{dst} exists and is not a folder; refusing to replace it")
    if is_bundle(dst):
        if not overwrite:
            raise BundleError(f"{dst} is already a bundle; pass overwrite=True to replace it")
        return
    if any(dst.iterdir()):
        raise BundleError(f"{dst} is a non-empty folder that is not a bundle; refusing to "
                          "overwrite it (pick a new destination)")


def _rename_into_place(tmp: Path, dst: Path) -> None:
    """``tmp`` becomes ``dst`` unless ``dst`` became a non-empty folder since it was checked
    (another process wrote the bundle meanwhile, two runs converting one model into the cache
    at once): rename(2) never replaces a non-empty folder, so that one is left whole."""
    try:
        os.rename(tmp, dst)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) and not dst.is_file():
            raise
        what = "a bundle" if is_bundle(dst) else "a file or a non-empty folder"
        raise BundleError(f"{dst} became {what} while this bundle was written (another "
                          "process wrote it); left as it is") from None


def _swap_into_place(tmp: Path, dst: Path) -> None:
    if not dst.exists():
        os.rename(tmp, dst)
        return
    old = dst.parent / f"{dst.name}.old-{os.getpid()}"
    os.rename(dst, old)
    try:
        os.rename(tmp, dst)
    except BaseException:
        os.rename(old, dst)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _save_tensors(state_dict: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, t in state_dict.items():
        t = t.detach().to("cpu").contiguous()
        storage = t.untyped_storage()
        # safetensors refuses tensors sharing memory (slices of a fused upstream tensor).
        if storage.data_ptr() in seen or storage.nbytes() != t.numel() * t.element_size():
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[name] = t
    save_file(out, str(path))


def _config_dict(config: Any) -> dict[str, Any]:
    if hasattr(config, "to_dict"):
        data = config.to_dict()
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        data = dataclasses.asdict(config)
    elif isinstance(config, dict):
        data = dict(config)
    else:
        raise TypeError(f"cannot serialise a model config of type {type(config).__name__}")
    json.dumps(data)  # fail here, not half-way through writing the file
    return data


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _oasr_version() -> str:
    from oasr import __version__

    return __version__
