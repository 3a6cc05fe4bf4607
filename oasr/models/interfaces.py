"""What a model must implement to serve each decode family.

``CAPABILITIES`` maps a family name to the dotted attribute paths it calls on the model, each
with a one-line why. It is checked twice:

* when a model class is defined (``BaseAsrModel.__init_subclass__`` calls
  ``check_model_class``): every family the class declares in ``decode_families`` must be in the
  table, and every member must resolve on the class, through the types it annotates
  (``decoder: WhisperDecoder``, ``config: ConformerConfig``), so a class advertising a family it
  cannot serve fails at its definition, naming the missing members;
* on the built model (``require_capability``), once, at engine construction, for models that
  are not ``BaseAsrModel`` subclasses and for members only the loaded configuration decides.

A member the base classes declare but leave to the architecture (``BaseDecoder.prefill``) is
marked ``@unimplemented``; it counts as missing until a subclass overrides it.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Capability:
    family: str
    members: tuple[tuple[str, str], ...]  # (dotted attribute path, why it is needed)


def _cap(family: str, **members: str) -> Capability:
    return Capability(family, tuple((k.replace("__", "."), v) for k, v in members.items()))


CAPABILITIES: dict[str, Capability] = {
    # Label-synchronous attention encoder-decoder (Whisper): the incremental AR protocol.
    "aed": _cap(
        "aed",
        encode_offline="features -> encoder hidden states",
        decoder__prefill="encode the SOT prompt and cache the cross-attention K/V per row",
        decoder__step="one batched decoder step over the row-indexed KV cache",
        decoder__select="index_select rows of the decoder state (retirement, beam reorder)",
        decoder__forced_logits="teacher-forced logits: language detection after SOT",
        config__prompt_ids="the SOT prompt for a task and language (refuses unknown ones)",
        config__sot_sequence="the default prompt, whose length every row reserves",
        config__eos_token_id="end of text: the stop token",
        config__decoder_start_token_id="start of transcript: never text",
        config__suppress_tokens="ids suppressed at every step",
        config__begin_suppress_tokens="ids suppressed on the first generated token",
        config__max_target_positions="decoder positions a row may use",
        config__vocab_size="the logits' width",
        config__is_multilingual="whether a language is detected when none is given",
        config__lang_to_id="language codes and their ids",
        config__task_to_id="task names and their ids",
        config__no_timestamps_token_id="the timestamp-mode switch (None: no timestamp mode)",
        config__timestamp_begin="the first timestamp id (None: no timestamp mode)",
        config__alignment_heads="cross-attention heads word timings align with (may be empty)",
    ),
    # Speech LLM (Qwen2-Audio): audio embeddings spliced into a ChatML prompt, then the
    # incremental AR protocol over the causal LM.
    "llm": _cap(
        "llm",
        encode_offline="features -> (audio embeddings in the LM's space, their lengths)",
        decoder__embed="prompt ids -> embeddings (the audio is spliced among them)",
        decoder__prefill_embeds="a left-padded embedded prompt -> next-token logits + KV",
        decoder__step="one batched LM step over the row-indexed KV cache",
        decoder__select="index_select rows of the KV state (retirement)",
        config__render_prompt="the ChatML text around the audio for an instruction",
        config__audio_token_id="the <|AUDIO|> id the audio placeholder expands to",
        config__eos_token_ids="every id that ends the assistant's turn",
        config__pad_token_id="left padding (never attended)",
        config__max_position_embeddings="positions a row may use",
    ),
    # Frame-synchronous CTC: encoder and head fused into log-probs.
    "ctc": _cap(
        "ctc",
        forward_offline="features -> CTC log-probs (B, T, V), the fused encoder+head path",
        config__blank_id="the CTC blank's id (no default: a wrong blank decodes garbage)",
    ),
    # U2 / U2++: CTC prefix-beam n-best, then one teacher-forced attention-decoder pass.
    "ctc_aed_rescoring": _cap(
        "ctc_aed_rescoring",
        encode_offline="features -> (encoder hidden states, their lengths)",
        ctc_log_probs="hidden states -> CTC log-probs (B, T, V) for the prefix beam",
        attention_scores="one batched teacher-forced pass scoring every row's n-best",
        config__blank_id="the CTC blank's id (no default: a wrong blank decodes garbage)",
    ),
    # Transducer (RNN-T / icefall stateless): the family drives predictor and joiner itself.
    "transducer": _cap(
        "transducer",
        encode_offline="features -> (encoder hidden states, their lengths)",
        predictor__init_state="a TransducerPredictor: the start history of B streams",
        predictor__predict="the predictor projection for the current history",
        predictor__advance="append the emitted labels to the rows that emitted",
        predictor__blank_id="the blank label: advances the frame",
        joiner__forward="a Joiner: (encoder frame, predictor output) -> logits",
        joiner__project_encoder="the encoder half of the joint, once per frame",
        joiner__project_decoder="the predictor half of the joint, once per history",
    ),
    # Token-and-duration transducer (Parakeet TDT): greedy, the frame advancing by durations.
    "tdt": _cap(
        "tdt",
        encode_offline="features -> (encoder hidden states, their lengths)",
        predictor__init_state="the prediction network's state before any label",
        predictor__predict="the prediction network's output for a state",
        predictor__advance="append emitted labels to the rows that emitted",
        joiner__project_encoder="encoder frames -> the joint's input",
        joiner__project_decoder="prediction output -> the joint's input",
        config__blank_id="the blank's id",
        config__vocab_size="token logits come first in the joint's output, durations after",
        config__durations="the frames each duration logit stands for",
        config__max_symbols_per_step="labels one frame may emit before the frame is forced on",
    ),
    # Paraformer: one-shot non-autoregressive, CIF predictor then one decoder pass.
    "paraformer": _cap(
        "paraformer",
        encode_offline="features -> (encoder hidden states, their lengths)",
        predict="hidden states -> CIF acoustic embeddings, token counts, alphas, fire frames",
        nar_decode="acoustic embeddings + encoder memory -> logits (B, K, V) in one pass",
        config__blank_id="ids dropped from the argmax output (with sos_id / eos_id)",
    ),
}


class MissingCapabilityError(TypeError):
    pass


def unimplemented(fn: F) -> F:
    """Mark a base-class member an architecture must override to have it."""
    fn.__oasr_unimplemented__ = True  # type: ignore[attr-defined]
    return fn


def is_unimplemented(member: Any) -> bool:
    if inspect.ismethod(member):
        member = member.__func__
    return inspect.getattr_static(member, "__oasr_unimplemented__", False) is True


def _unknown_family(family: str) -> KeyError:
    return KeyError(f"no capability declared for decode family {family!r}; valid: "
                    f"{', '.join(sorted(CAPABILITIES))}")


# -- on an object ------------------------------------------------------------------------------
def _has_path(obj: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
        if is_unimplemented(obj):
            return False
    return True


def missing_members(model: Any, family: str) -> list[str]:
    if family not in CAPABILITIES:
        raise _unknown_family(family)
    return [path for path, _ in CAPABILITIES[family].members if not _has_path(model, path)]


def _raise_missing(name: str, family: str, missing: list[str], where: str) -> None:
    why = dict(CAPABILITIES[family].members)
    detail = "; ".join(f"{m} ({why[m]})" for m in missing)
    raise MissingCapabilityError(f"{name} cannot serve decode family {family!r}{where}: "
                                 f"missing {detail}")


def require_capability(model: Any, family: str) -> None:
    """Raise naming every member ``model`` lacks for ``family``."""
    missing = missing_members(model, family)
    if missing:
        _raise_missing(type(model).__name__, family, missing, "")


# -- on a class ----------------------------------------------------------------------------------
def _annotation(cls: type, name: str) -> Any:
    """The type ``cls`` (or a base) annotates attribute ``name`` with, resolved; ``None`` if
    it annotates none."""
    for klass in cls.__mro__:
        if name in klass.__dict__.get("__annotations__", {}):
            try:
                return typing.get_type_hints(klass)[name]
            except NameError as exc:
                raise TypeError(f"{klass.__qualname__}.{name}: the annotation cannot be "
                                f"resolved ({exc}); import the type it names") from exc
    return None


def _types_of(hint: Any) -> list[type]:
    """The classes a type hint admits (a union's members; ``None`` dropped)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(hint) if a is not type(None) for t in _types_of(a)]
    return [hint] if isinstance(hint, type) else []


def _class_has_path(cls: type, dotted: str) -> bool:
    """Whether ``dotted`` resolves on instances of ``cls``, judged from the class: class
    members, dataclass fields and annotated attributes (whose annotated types must all have
    the rest of the path)."""
    head, _, rest = dotted.partition(".")
    static = inspect.getattr_static(cls, head, None)
    if static is not None:
        if is_unimplemented(static):
            return False
        if not rest or isinstance(static, (property, staticmethod, classmethod)) or callable(
                static):
            # The value behind a property or a method's result is an instance matter.
            return True
        return _class_has_path(type(static), rest)
    fields = getattr(cls, "__dataclass_fields__", {})
    hint = _annotation(cls, head)
    if hint is None and head not in fields:
        return False
    if not rest:
        return True
    types = _types_of(hint)
    return bool(types) and all(_class_has_path(t, rest) for t in types)


def check_model_class(cls: type, families: tuple[str, ...]) -> None:
    """Raise at class definition if ``cls`` declares a family whose members it lacks."""
    for family in families:
        if family not in CAPABILITIES:
            raise _unknown_family(family)
        missing = [p for p, _ in CAPABILITIES[family].members if not _class_has_path(cls, p)]
        if missing:
            _raise_missing(cls.__qualname__, family, missing,
                           " (annotate the attributes it reaches, e.g. decoder: MyDecoder)")
