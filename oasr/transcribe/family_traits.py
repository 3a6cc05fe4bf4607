"""What a run asks of the engine's decode family, through its admission check (the family's
public contract): timestamp mode, prompts."""

from __future__ import annotations

from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions

__all__ = ["repairs_uncovered_speech", "resolve_conditioning", "resumes_from_timestamps",
           "takes_prompts"]


def resumes_from_timestamps(engine: ASREngine) -> bool:
    """Whether the engine's decode family, as configured, honours Whisper's timestamp mode."""
    try:
        engine.strategy.validate_options(DecodingOptions(timestamps=True))
    except ValueError:
        return False
    return True


def takes_prompts(engine: ASREngine) -> bool:
    """Whether the engine's decode family, as configured, admits a text prompt (Whisper's
    ``<|startofprev|>``) and has the tokenizer to encode one."""
    if not hasattr(engine.tokenizer, "encode"):
        return False
    try:
        engine.strategy.validate_options(DecodingOptions(prompt="a"))
    except ValueError:
        return False
    return True


def resolve_conditioning(engine: ASREngine, asked: bool | None) -> bool:
    """``condition_on_previous_text`` as a run applies it: None is on where the model takes
    prompts; True on a model that takes none raises."""
    if asked is None:
        return takes_prompts(engine)
    if asked and not takes_prompts(engine):
        raise ValueError("condition_on_previous_text: this model's decode family takes no "
                         "prompt (Whisper's does); drop --condition-on-previous-text")
    return asked


def repairs_uncovered_speech(engine: ASREngine) -> bool:
    """Whether speech no word covers is decoded again on its own. A label-synchronous family
    (``incremental``: Whisper, Qwen2-Audio) can end a window on its end-of-text token before
    the window's speech ends, or seek past speech, so a stretch decoded alone recovers words.
    A frame-synchronous one (CTC, transducers, Paraformer) scores every frame: what it left
    uncovered it heard and emitted nothing for, and a stretch decoded apart from its context
    would differ from the upstream recipe's decode of the whole (coverage is still measured)."""
    return engine.strategy.incremental
