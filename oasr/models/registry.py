"""The architecture axis: which model classes exist and which checkpoint formats feed them.

In-tree architectures are registered lazily by ``"module:attr"`` strings (vLLM's model
registry does the same), so listing them imports nothing heavy; out-of-tree ones arrive
through the ``oasr.models`` entry-point group, loaded on first access. An entry point names a
``ModelEntry`` (or a function marked with ``oasr.registry.plugin`` that registers some).

Those strings come from code only: a name read from a checkpoint or bundle (an architecture, a
model config class) is looked up here, never imported, so data cannot choose code to run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from oasr.registry import Registry, UnknownNameError

__all__ = [
    "ModelEntry",
    "CheckpointConverter",
    "NoConverterError",
    "MODEL_REGISTRY",
    "register_model",
    "get_model_entry",
    "list_models",
    "detect_converter",
    "build_model_from_checkpoint",
    "ConfigClassError",
    "declared_config_classes",
    "model_config_class",
]


def _resolve(target: Any) -> Any:
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    return target


@runtime_checkable
class CheckpointConverter(Protocol):
    """What the registry needs from a checkpoint format (the base class lives in converter.py).

    ``detect`` must look for positive markers of its format; ``detect_specificity`` breaks ties
    when two formats both claim a folder (higher wins); ``looks_for`` says in one line what
    ``detect`` checks, so a folder nothing claims gets a useful error. A format whose checkpoint
    is one file (a ``.nemo`` tar) sets ``reads_files = True``; other paths given as files are
    refused naming those formats.
    """

    architecture: str
    source_format: str
    detect_specificity: int
    looks_for: str

    def detect(self, path: Path) -> bool: ...

    def build_config(self, path: Path) -> Any: ...

    def load_state_dict(self, path: Path, config: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ModelEntry:
    """One architecture: its model class, its converters and its modes.

    ``model_cls`` and each converter may be a ``"module:attr"`` string, imported on first use.
    What it decodes is the model class's ``decode_families``; ``families`` repeats them as data
    so listing the registry (``oasr models``) imports no model and no torch. The class stays
    the authority: ``load_model_cls`` refuses a class whose families differ from the entry's.
    """

    name: str
    model_cls: Any
    converters: tuple[Any, ...] = ()
    modes: tuple[str, ...] = ("offline",)
    description: str = ""
    source_formats: tuple[str, ...] = field(default=())
    families: tuple[str, ...] = ()  # empty: read from the model class (imports it)

    def load_model_cls(self) -> type:
        """The model class (imported on first use); it must subclass ``BaseAsrModel`` and
        declare the entry's ``families`` when the entry lists them."""
        from oasr.models.base import BaseAsrModel

        cls = _resolve(self.model_cls)
        if not (isinstance(cls, type) and issubclass(cls, BaseAsrModel)):
            raise TypeError(f"architecture {self.name!r}: {cls!r} is not a BaseAsrModel "
                            "subclass; derive the model from oasr.models.BaseAsrModel")
        if self.families and tuple(cls.decode_families) != tuple(self.families):
            raise TypeError(f"architecture {self.name!r}: the entry lists decode families "
                            f"{self.families} but {cls.__name__} declares "
                            f"{cls.decode_families}; make the two agree")
        return cls

    @property
    def decode_families(self) -> tuple[str, ...]:
        """The families it decodes, the first being the default: the entry's ``families``
        without importing anything, else the model class's (imports it)."""
        if self.families:
            return tuple(self.families)
        return self.load_model_cls().decode_families

    def load_converters(self) -> list[CheckpointConverter]:
        out = []
        for c in self.converters:
            obj = _resolve(c)
            out.append(obj() if isinstance(obj, type) else obj)
        return out


MODEL_REGISTRY: Registry[ModelEntry] = Registry("architecture", entry_point_group="oasr.models")


def register_model(entry: ModelEntry | str, name: str | None = None) -> ModelEntry | str:
    """Register an architecture; ``entry`` may be a lazy ``"module:ENTRY"`` string with ``name``."""
    if isinstance(entry, str):
        if name is None:
            raise ValueError("a lazy model entry needs its name: register_model('mod:ATTR', name)")
        MODEL_REGISTRY.register(name, entry)
        return entry
    MODEL_REGISTRY.register(entry.name, entry)
    return entry


def get_model_entry(name: str) -> ModelEntry:
    return MODEL_REGISTRY.get(name)


def list_models() -> list[ModelEntry]:
    return [MODEL_REGISTRY.get(n) for n in MODEL_REGISTRY.names()]


class NoConverterError(ValueError):
    """No registered checkpoint format recognises a path."""


def detect_converter(path: str | Path, architecture: str | None = None) -> CheckpointConverter:
    """The most specific converter whose ``detect`` claims ``path``.

    Raises:
        NoConverterError: nothing claims it; the message lists what each detector looked for.
        UnknownNameError: ``architecture`` is not registered.
    """
    path = Path(path)
    entries = [get_model_entry(architecture)] if architecture else list_models()
    tried: list[str] = []
    claims: list[CheckpointConverter] = []
    for entry in entries:
        for conv in entry.load_converters():
            tried.append(f"{entry.name}/{conv.source_format}: {conv.looks_for}")
            if conv.detect(path):
                claims.append(conv)
    if not claims and path.is_file():
        readers = sorted({c.looks_for for e in entries for c in e.load_converters()
                          if getattr(c, "reads_files", False)})
        raise NoConverterError(
            f"{path} is a file no registered format reads as a checkpoint (files read: "
            f"{'; '.join(readers) or 'none'}); pass the folder that holds the model")
    if not claims:
        looked = "\n  ".join(tried) if tried else "(no architectures are registered)"
        raise NoConverterError(
            f"{path} is not a checkpoint any registered format recognises. Looked for:\n  {looked}"
        )
    return max(claims, key=lambda c: c.detect_specificity)


class ConfigClassError(ValueError):
    """A recorded model config class is not the one its architecture declares."""


def declared_config_classes(architecture: str) -> tuple[str, ...]:
    """The ``"module:Class"`` names ``architecture``'s converters declare for their configs.

    Raises:
        UnknownNameError: ``architecture`` is not registered.
    """
    entry = get_model_entry(architecture)
    return tuple(sorted({str(c.config_class) for c in entry.load_converters()
                         if getattr(c, "config_class", "")}))


def model_config_class(architecture: str, recorded: str = "") -> type:
    """The model config class of ``architecture``, found through the registry.

    ``recorded`` (a bundle's ``model_config_class``) must be one the architecture's converters
    declare; a name read from a file is compared, never imported, so data cannot choose code.
    Empty: the architecture's one declared class.

    Raises:
        UnknownNameError: ``architecture`` is not registered.
        ConfigClassError: ``recorded`` is not declared, or no single class is.
    """
    declared = declared_config_classes(architecture)
    listing = " or ".join(declared) or "none is declared by its converters"
    if recorded and recorded not in declared:
        raise ConfigClassError(f"model_config_class {recorded!r} is not architecture "
                               f"{architecture!r}'s config class ({listing})")
    if not recorded and len(declared) != 1:
        raise ConfigClassError(f"architecture {architecture!r} has no single config class "
                               f"({listing}); record model_config_class")
    cls = _resolve(recorded or declared[0])
    if not (isinstance(cls, type) and callable(getattr(cls, "from_dict", None))):
        raise ConfigClassError(f"{recorded or declared[0]} is not a config class with from_dict")
    return cls


def build_model_from_checkpoint(path: str | Path, architecture: str | None = None) -> Any:
    """Detect the format of ``path``, build the model from its config and load its weights."""
    conv = detect_converter(path, architecture)
    entry = get_model_entry(conv.architecture)
    config = conv.build_config(Path(path))
    model = entry.load_model_cls().from_config(config)
    model.load_weights(conv.load_state_dict(Path(path), config))
    return model


__all__ += ["UnknownNameError"]
