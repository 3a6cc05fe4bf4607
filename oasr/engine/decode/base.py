"""The decode-family base: what a strategy declares and what the engine calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from oasr.engine.decode.streaming import check_streaming_session

Consumes = Literal["log_probs", "hidden", "both"]


class DecodeStrategy:
    """Turns encoder output into tokens, one family per subclass.

    Declarations:
        consumes: ``"log_probs"`` (fused encoder + CTC head), ``"hidden"`` (the strategy drives
            ``model.decoder`` itself) or ``"both"``.
        incremental: label-synchronous AR families driven by ``begin_offline`` /
            ``advance(StepBudget)`` / ``has_pending``.
        capability: the ``CAPABILITIES`` key checked against the model at construction.
        options_cls: the family's options dataclass (``None``: no knobs).
        selective_options: per-request options that change *what* is decoded and that this
            family can act on; anything else of that class is refused at admission.
        streaming_session: the family's chunk-wise streaming search
            (``oasr.engine.decode.streaming.StreamingSession`` subclass), ``None``: the family
            does not stream chunk-wise. Checked when the class is defined.
    """

    name: ClassVar[str] = ""
    consumes: ClassVar[Consumes] = "hidden"
    incremental: ClassVar[bool] = False
    capability: ClassVar[str | None] = None
    options_cls: ClassVar[type | None] = None
    selective_options: ClassVar[tuple[str, ...]] = ()
    streaming_session: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_streaming_session(cls.__qualname__, cls.__dict__.get("streaming_session"))
        if "decode_offline" in cls.__dict__ and "search_offline" not in cls.__dict__:
            # a family redefining decode_offline alone must not inherit a parent's split of
            # the parent's decode
            cls.search_offline = DecodeStrategy.search_offline  # type: ignore[method-assign]

    def __init__(self, model: Any, options: Any = None, *, tokenizer: Any = None,
                 engine_config: Any = None, feature_config: Any = None) -> None:
        self.model = model
        self.options = options
        self.tokenizer = tokenizer
        self.engine_config = engine_config
        # The frontend's geometry: half of the frame clock word timings need.
        self.feature_config = feature_config

    @property
    def clock(self) -> Any:
        """Seconds per encoder frame (``FrameClock``), or ``None`` when the model or the
        frontend does not declare its geometry (word timings are then refused)."""
        from oasr.engine.decode.alignment import FrameClock

        return FrameClock.resolve(self.model, self.feature_config)

    def validate_options(self, decoding: Any) -> None:
        """Refuse, at admission, a request setting a selective option this family cannot honour.

        Selective options change *what* is decoded (``task``, ``language``,
        ``word_timestamps``); silently ignoring one would return a transcript of something else.
        """
        decoding.validate()
        for name in decoding.set_selective():
            if name == "word_timestamps":
                if "offline" not in self.word_timing_modes:
                    modes = ", ".join(self.word_timing_modes) or "none"
                    raise ValueError(
                        f"decode family {self.name!r} cannot time words in this configuration "
                        f"(modes it can: {modes})"
                    )
            elif name not in self.selective_options:
                raise ValueError(
                    f"decode family {self.name!r} cannot act on {name!r}; it supports: "
                    f"{', '.join(self.selective_options) or 'no selective options'}"
                )

    def admit_limit(self) -> int | None:
        """Requests the family's decoder-KV budget lets the engine admit now (``None``: no
        limit); checked at every admission."""
        return None

    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        """The modes (``"offline"``, ``"streaming"``) this configuration can time words in."""
        return ()

    # -- what the engine calls ------------------------------------------------------------
    # A one-shot family implements ``decode_offline``; an incremental one (``incremental =
    # True``) ``begin_offline`` / ``advance`` / ``has_pending`` / ``active_rows``.
    # :func:`check_contract` holds every registered family to its half.

    def decode_offline(self, enc: Any, enc_lens: Any, requests: list[Any]) -> list[Any]:
        """One-shot families: a micro-batch's encoder output ``(B, T, C)`` (log-probs or
        hidden, per ``consumes``) and lengths ``(B,)`` -> one ``RequestOutput`` per request."""
        raise NotImplementedError(f"{type(self).__name__} is one-shot but has no decode_offline")

    def search_offline(self, enc: Any, enc_lens: Any, requests: list[Any]
                       ) -> Callable[[], list[Any]]:
        """``decode_offline`` in two halves: the search now, and the host work that turns its
        result into outputs (detokenising, word timings) in the returned call, which the engine
        makes while the next micro-batch's encoder runs on the device. A family whose outputs
        are cheap to build keeps this default (everything now)."""
        outputs = self.decode_offline(enc, enc_lens, requests)
        return lambda: outputs

    def begin_offline(self, requests: list[Any], enc: Any, enc_lens: Any) -> None:
        """Incremental families: prefill a micro-batch; its rows then advance step by step."""
        raise NotImplementedError(f"{type(self).__name__} is incremental but has no "
                                  "begin_offline")

    def advance(self, budget: Any) -> list[Any]:
        """Incremental families: decoder steps while ``budget.take()`` allows; the requests
        that finished."""
        raise NotImplementedError(f"{type(self).__name__} is incremental but has no advance")

    def has_pending(self) -> bool:
        """Whether rows are still decoding (or finished and not yet returned)."""
        return False

    @property
    def active_rows(self) -> int:
        """Rows holding decoder state now (the engine admits up to ``max_decode_slots``)."""
        return 0


# The members each kind of family must define itself (not inherit from DecodeStrategy).
ONE_SHOT_MEMBERS = ("decode_offline",)
INCREMENTAL_MEMBERS = ("begin_offline", "advance", "has_pending", "active_rows")


def check_contract(cls: type[DecodeStrategy]) -> None:
    """Raise ``TypeError`` naming what a family class lacks for what it declares."""
    if cls.consumes not in ("log_probs", "hidden", "both"):
        raise TypeError(f"{cls.__name__}.consumes = {cls.consumes!r}: use log_probs, hidden "
                        "or both")
    needed = INCREMENTAL_MEMBERS if cls.incremental else ONE_SHOT_MEMBERS
    missing = [m for m in needed if getattr(cls, m) is getattr(DecodeStrategy, m)]
    if missing:
        kind = "incremental" if cls.incremental else "one-shot"
        raise TypeError(f"decode family {cls.__name__} is {kind} but does not implement "
                        f"{', '.join(missing)}")
