"""The decode-family axis: ``register_decode_strategy`` / ``build_decode_strategy``."""

from __future__ import annotations

import dataclasses
from typing import Any

from oasr.engine.decode.base import DecodeStrategy, check_contract
from oasr.engine.decode.encoder_chunks import configure_encoder_chunks
from oasr.engine.decode.options import resolve_options
from oasr.models.interfaces import require_capability
from oasr.registry import Registry

DECODE_STRATEGIES: Registry[type[DecodeStrategy]] = Registry(
    "decode strategy", entry_point_group="oasr.decode_strategies"
)

DECODE_STRATEGIES.register("aed", "oasr.engine.decode.aed:AedDecodeStrategy")
DECODE_STRATEGIES.register("ctc", "oasr.engine.decode.ctc:CtcDecodeStrategy")
DECODE_STRATEGIES.register("ctc_wfst", "oasr.engine.decode.ctc_wfst:CtcWfstDecodeStrategy")
DECODE_STRATEGIES.register("llm", "oasr.engine.decode.llm:LlmDecodeStrategy")
DECODE_STRATEGIES.register(
    "ctc_aed_rescoring", "oasr.engine.decode.ctc_aed_rescoring:CtcAedRescoringStrategy"
)
DECODE_STRATEGIES.register("transducer", "oasr.engine.decode.transducer:TransducerDecodeStrategy")
# Token-and-duration transducers (Parakeet TDT).
DECODE_STRATEGIES.register("tdt", "oasr.engine.decode.tdt:TdtDecodeStrategy")
# Paraformer's one-pass non-autoregressive decode.
DECODE_STRATEGIES.register("paraformer", "oasr.engine.decode.paraformer:ParaformerDecodeStrategy")


def register_decode_strategy(name: str):
    """Class decorator: register a ``DecodeStrategy`` subclass under ``name``."""

    def decorator(cls: type[DecodeStrategy]) -> type[DecodeStrategy]:
        if not (isinstance(cls, type) and issubclass(cls, DecodeStrategy)):
            raise TypeError(f"{cls!r} is not a DecodeStrategy subclass")
        check_contract(cls)
        cls.name = name
        DECODE_STRATEGIES.register(name, cls)
        return cls

    return decorator


def build_decode_strategy(name: str, model: Any, options: Any = None,
                          **kwargs: Any) -> DecodeStrategy:
    """Instantiate family ``name`` for ``model``, checking the model's capability first.

    ``options`` may be the family's options object or a dict of overrides (typed and checked
    against the family's ``options_cls``); ``kwargs`` (tokenizer, engine_config) pass through.
    """
    cls = DECODE_STRATEGIES.get(name)
    check_contract(cls)  # a lazily registered family is checked when first built
    require_capability(model, cls.capability or name)
    if options is None or isinstance(options, dict):
        options = resolve_options(cls.options_cls, options)
    configure_encoder_chunks(model, options)
    return cls(model, options, **kwargs)


def family_defaults(family: str, checkpoint: dict[str, Any] | None,
                    overrides: dict[str, Any] | None) -> dict[str, Any]:
    """The options a family is built with: the checkpoint's defaults that name one of its
    options (e.g. WeNet's ``rescoring_reverse_weight`` from train.yaml), then ``overrides``."""
    cls = DECODE_STRATEGIES.get(family).options_cls
    names = {f.name for f in dataclasses.fields(cls)} if cls is not None else set()
    merged = {k: v for k, v in (checkpoint or {}).items() if k in names}
    merged.update(overrides or {})
    return merged
