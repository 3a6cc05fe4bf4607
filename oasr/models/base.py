"""The model contract: what an architecture implements, as base classes.

An architecture is a ``BaseAsrModel`` holding a ``BaseEncoder`` and, for autoregressive
families, a ``BaseDecoder`` (transducers compose a ``TransducerPredictor`` and a ``Joiner``).
The bases declare every member the engine reads, with the default "nothing declared", so the
engine reads ``model.encoder.streaming_kind`` rather than probing for it; a member an
architecture must supply itself is ``@unimplemented`` (``oasr.models.interfaces``) until a
subclass overrides it.

The decode families a model serves are declared once, on the model class
(``decode_families``, the first is the default); defining a class that declares a family whose
``CAPABILITIES`` members it lacks raises there, naming them. ``docs/models.md`` has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from oasr.models.interfaces import check_model_class, unimplemented

if TYPE_CHECKING:
    from oasr.cache.kv_budget import DecoderCacheSpec

__all__ = [
    "STREAMING_KINDS",
    "BaseAsrModel",
    "BaseDecoder",
    "BaseEncoder",
    "Joiner",
    "SmoothingGroup",
    "StreamingGeometry",
    "StreamingStateSpec",
    "TransducerPredictor",
    "check_streaming_declaration",
]

# How an encoder's per-stream cache is owned across chunks (oasr.engine.streaming_backend):
# paged K/V that grows, a fixed-extent slot cache the engine owns and captures, a list of state
# tensors threaded per request, or no chunk-wise path.
STREAMING_KINDS = ("paged", "slot", "stateful", "none")

# The members each streaming kind needs on the encoder.
STREAMING_SURFACE: dict[str, tuple[str, ...]] = {
    "paged": ("forward_chunk_paged", "output_lengths"),
    "slot": ("get_streaming_init_states", "streaming_forward"),
    "stateful": ("get_streaming_init_states", "streaming_forward"),
    "none": (),
}


@dataclass(frozen=True)
class StreamingStateSpec:
    """One fixed-extent per-stream tensor an encoder carries across chunks: the one declaration
    type of both ``streaming_state_specs`` (beside paged K/V) and ``slot_state_specs`` (a whole
    slot cache).

    shape: per stream (no batch axis); name: what it is (for messages); batch_dim: where the
    encoder's ``streaming_forward`` expects the batch axis in the state it is handed (a slot
    cache stores every state slot-major and moves the axis); dtype: ``None`` for float32;
    fill: its initial value.
    """

    shape: tuple[int, ...]
    name: str = ""
    batch_dim: int = 0
    dtype: torch.dtype | None = None
    fill: float = 0.0


@dataclass(frozen=True)
class StreamingGeometry:
    """The feature frames one streaming chunk reads and advances, for ``chunk`` output frames.

    The generic formula (an encoder returning ``None`` from ``streaming_geometry``):
    ``window = (chunk - 1) * subsampling_rate + right_context + 1`` read, ``stride =
    chunk * subsampling_rate`` advanced.

    first_window: frames the first chunk reads when it differs from ``window`` (an encoder
    that caches its subsampling's input, so the first chunk lacks the left frames a later one
    reads); it advances ``first_window - (window - stride)``. pad_last: the runtime takes only
    whole windows, so a last short one is zero-padded to its size (its padded output frames
    are kept, as the reference streaming decode keeps them). tail: frames of the encoder's
    ``streaming_pad_value`` appended when the input ends (icefall's Zipformer: 13); then chunks
    go while any frame (real or tail) is left at the next chunk's start, each padded to the
    window with the pad value and advancing ``stride`` (every padded output frame kept).
    """

    chunk: int
    window: int
    stride: int
    first_window: int | None = None
    pad_last: bool = False
    tail: int = 0


@dataclass(frozen=True)
class SmoothingGroup:
    """Projections that read one input, so an activation-smoothing scale must be shared.

    members: module paths (from the model root) of ``QuantizableGemm`` layers.
    """

    name: str
    members: tuple[str, ...]


class BaseEncoder(nn.Module):
    """Features -> hidden states, and the geometry the engine reads instead of constants.

    Attributes (class attributes, or instance attributes set from the config):
        subsampling_rate: input frames per output frame; ``None``: not declared (the frame
            clock, and so word timings, are then refused).
        right_context: input frames of look-ahead one output frame needs.
        streaming_kind: one of ``STREAMING_KINDS``; what this configuration's weights can do,
            not what the class implements (``"none"`` when the checkpoint has no chunk-wise
            path).
        streaming_chunk_frames / streaming_window_frames: (slot, stateful) output frames per
            chunk and the attention window, ``None`` when not declared.
        streaming_state_specs: fixed-extent per-stream tensors beside paged K/V.
        slot_state_specs: the whole cache, in list order, when every tensor is fixed-extent
            (``streaming_kind = "slot"``).
        fixed_attention_window: a trained attention span (the engine pre-fills the K/V window).
    """

    subsampling_rate: int | None = None
    right_context: int = 0
    streaming_kind: str = "none"
    streaming_chunk_frames: int | None = None
    streaming_window_frames: int | None = None
    streaming_state_specs: tuple[StreamingStateSpec, ...] = ()
    slot_state_specs: tuple[StreamingStateSpec, ...] = ()
    fixed_attention_window: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("streaming_kind")
        if isinstance(kind, str) and kind not in STREAMING_KINDS:
            raise TypeError(f"{cls.__qualname__}.streaming_kind={kind!r}; valid: "
                            f"{', '.join(STREAMING_KINDS)}")

    def streaming_geometry(self, chunk: int) -> StreamingGeometry | None:
        """The frames a chunk of ``chunk`` output frames reads, or ``None`` for the generic
        formula (``StreamingGeometry``). Raise ``ValueError`` for a chunk it cannot serve."""
        return None


def check_streaming_declaration(encoder: BaseEncoder) -> list[str]:
    """What an encoder's streaming declaration lacks for its kind (empty: consistent)."""
    kind = encoder.streaming_kind
    if kind not in STREAMING_KINDS:
        return [f"streaming_kind={kind!r} (valid: {', '.join(STREAMING_KINDS)})"]
    problems = [f"{m} (streaming_kind={kind!r} needs it)" for m in STREAMING_SURFACE[kind]
                if not callable(getattr(type(encoder), m, None))]
    if kind == "slot" and not encoder.slot_state_specs:
        problems.append("slot_state_specs (a slot cache declares its tensors)")
    return problems


class BaseDecoder(nn.Module):
    """A label-synchronous autoregressive decoder: the batched incremental surface.

    ``prefill`` / ``step`` / ``select`` over a row-indexed state (``oasr/cache/decoder_state``).
    ``supports_step_graphs``: a step over a paged state reads only fixed addresses, so it may be
    captured into a CUDA graph. ``cache_spec``: the per-row KV geometry (``None``: the KV
    cannot be paged or budgeted). ``max_positions``: positions a row may hold.
    """

    supports_step_graphs: bool = False
    cache_spec: DecoderCacheSpec | None = None
    max_positions: int | None = None

    @unimplemented
    def prefill(self, enc: torch.Tensor, prompt: torch.Tensor, capacity: int,
                enc_lens: torch.Tensor | None = None, pool: Any = None
                ) -> tuple[torch.Tensor, Any]:
        """enc (B, T_enc, C), prompt (B, P) -> next-token logits (B, V) and the group's state,
        reserving ``capacity`` positions per row (on ``pool`` when given: paged)."""
        raise NotImplementedError

    @unimplemented
    def step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        """tokens (B,) -> next-token logits (B, V); appends one key per row."""
        raise NotImplementedError

    @unimplemented
    def select(self, state: Any, idx: torch.Tensor) -> Any:
        """The state's rows ``idx`` (B',): retirement, beam expansion and reorder."""
        raise NotImplementedError


class TransducerPredictor(nn.Module):
    """A transducer's prediction network: label history -> a projection the joiner reads.

    Per-stream state is opaque to the engine; ``stack_states`` / ``unstack_states`` lay N
    streams out as one batch and back, which keeps the streaming stage's call batched.
    ``stateless_tensors()`` declares a label-window embedding + grouped conv (icefall's
    stateless decoder) so the fused greedy kernel can run it; ``None`` keeps the loop.
    """

    blank_id: int  # the blank label, which advances the frame

    @unimplemented
    def init_state(self, batch: int, device: torch.device) -> Any:
        """The state of ``batch`` fresh streams (the blank / start history)."""
        raise NotImplementedError

    @unimplemented
    def predict(self, state: Any) -> torch.Tensor:
        """The projection (B, C_dec) the joiner reads for the current history."""
        raise NotImplementedError

    @unimplemented
    def advance(self, state: Any, tokens: torch.Tensor, emitted: torch.Tensor) -> Any:
        """Append ``tokens`` (B,) to the rows where ``emitted`` (B,) bool; others unchanged."""
        raise NotImplementedError

    @unimplemented
    def stack_states(self, states: list[Any]) -> Any:
        """N per-stream states -> one batched state."""
        raise NotImplementedError

    @unimplemented
    def unstack_states(self, state: Any) -> list[Any]:
        """One batched state -> its per-stream states."""
        raise NotImplementedError

    def stateless_tensors(self) -> dict[str, torch.Tensor] | None:
        """The tensors of a stateless predictor, or ``None`` (not stateless: keep the loop)."""
        return None

    @property
    def label_window(self) -> int | None:
        """``N`` when the state is the last ``N`` labels (B, N) int64 and ``predict`` reads
        any such window, which is what modified beam search builds its hypotheses' states
        from; ``None`` (a recurrent predictor) refuses beam search."""
        return None


class Joiner(nn.Module):
    """A transducer's joint network: (encoder frame, predictor projection) -> logits.

    ``additive_tensors()`` declares ``output(act(enc_proj + dec_proj))`` (tanh or ReLU) so the
    fused greedy kernel can run it; ``None`` (a non-additive joint) keeps the loop.
    """

    @unimplemented
    def forward(self, enc: torch.Tensor, dec: torch.Tensor) -> torch.Tensor:
        """enc (B, C_enc), dec (B, C_dec) projections -> logits (B, V)."""
        raise NotImplementedError

    def additive_tensors(self) -> dict[str, Any] | None:
        """The additive joint's tensors and activation, or ``None``."""
        return None

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        """The encoder frames' half of the joint, computed once per frame (identity here)."""
        return enc

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        """The predictor output's half of the joint, computed once per history (identity)."""
        return dec


class BaseAsrModel(nn.Module):
    """An architecture: an encoder, a head or a decoder, and the families it serves.

    Subclasses declare ``decode_families`` (the first is the default) and annotate the
    attributes the families reach (``decoder: WhisperDecoder``, ``config: ConformerConfig``),
    which is what the definition-time capability check reads.
    """

    decode_families: ClassVar[tuple[str, ...]] = ()
    encoder: BaseEncoder
    decoder: BaseDecoder | None
    config: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.decode_families:
            check_model_class(cls, cls.decode_families)

    @classmethod
    def from_config(cls, config: Any) -> BaseAsrModel:
        """The model for ``config`` with freshly initialised weights."""
        return cls(config)  # type: ignore[call-arg]

    @property
    def default_decode_type(self) -> str:
        """The family the engine uses when none is named: the first declared."""
        if not self.decode_families:
            raise TypeError(f"{type(self).__name__} declares no decode_families")
        return self.decode_families[0]

    def load_weights(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        """Load converted weights; ``strict`` refuses missing or unexpected keys by name."""
        missing, unexpected = self.load_state_dict(state_dict, strict=False)
        if strict and (missing or unexpected):
            raise ValueError(
                f"{type(self).__name__} weights do not match the model: missing "
                f"{sorted(missing)}, unexpected {sorted(unexpected)}"
            )

    def encoder_options(self) -> dict[str, Any]:
        """The encoder's configuration-dependent behaviour, by name (Conformer: the chunk mask
        a static-chunk checkpoint keeps offline); empty when there is none. A ``language``
        entry declares a language prompt (``apply_prompt(hidden, languages)``), which the
        ``transducer`` family and the chunk-wise policy admit per request / stream."""
        return {}

    def quantization_layout(self) -> tuple[SmoothingGroup, ...]:
        """Projections that share an input (activation smoothing must share their scale);
        empty: nothing declared."""
        return ()
