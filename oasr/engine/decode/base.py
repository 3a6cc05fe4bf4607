"""The decode-family base: what a strategy declares and what the engine calls."""

from __future__ import annotations

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
