"""``WhisperConfig``: Whisper's dimensions, its parameter-name contract and its prompt metadata.

The parameter names (``parameter_shapes``) are transformers' ``WhisperForConditionalGeneration``
names with the leading ``model.`` stripped and ``proj_out.weight`` left out: the output
projection is tied to ``decoder.embed_tokens.weight``. Every converter maps onto these names and
the model's ``state_dict`` must have exactly them.

The decoding metadata is recorded by the converter from the checkpoint's own tokenizer and
generation config, because token ids move between Whisper releases (large-v3 added a language
and shifted every id after it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.models.catalog import multilingual_suggestion
from oasr.models.config_dict import DictConfig

TASKS = ("transcribe", "translate")


@dataclass
class WhisperConfig(DictConfig):
    """Whisper's shape and decoding metadata.

    Dimensions:
        n_mels: log-mel bins the encoder's first convolution reads.
        vocab_size: rows of the token embedding (= output logits, tied).
        d_model: hidden width of encoder and decoder.
        encoder_layers / decoder_layers: transformer blocks per stack.
        encoder_attention_heads / decoder_attention_heads: heads per attention.
        encoder_ffn_dim / decoder_ffn_dim: inner width of the feed-forward blocks.
        max_source_positions: encoder positions (1500 = 30 s after the stride-2 conv).
        max_target_positions: decoder positions (prompt + generated tokens).

    Decoding metadata (``None`` / empty until a converter fills it; ``validate`` checks it):
        decoder_start_token_id: ``<|startoftranscript|>``.
        eos_token_id / pad_token_id: ``<|endoftext|>`` (Whisper pads with it).
        no_timestamps_token_id: ``<|notimestamps|>``; timestamp tokens start right after it.
        sot_sequence: the default prompt, e.g. ``[sot, <|en|>, <|transcribe|>,
            <|notimestamps|>]`` (multilingual) or ``[sot, <|notimestamps|>]`` (English-only).
        suppress_tokens: ids never sampled; begin_suppress_tokens: ids not sampled first.
        alignment_heads: ``[layer, head]`` cross-attention heads that track time (word timings).
        lang_to_id: language code (``"en"``) -> its token id; empty for English-only models.
        task_to_id: ``{"transcribe": id, "translate": id}``.
        is_multilingual: whether the prompt carries language and task slots.
    """

    n_mels: int = 80
    vocab_size: int = 51865
    d_model: int = 384
    encoder_layers: int = 4
    encoder_attention_heads: int = 6
    decoder_layers: int = 4
    decoder_attention_heads: int = 6
    encoder_ffn_dim: int = 1536
    decoder_ffn_dim: int = 1536
    max_source_positions: int = 1500
    max_target_positions: int = 448

    decoder_start_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    no_timestamps_token_id: int | None = None
    sot_sequence: list[int] = field(default_factory=list)
    suppress_tokens: list[int] = field(default_factory=list)
    begin_suppress_tokens: list[int] = field(default_factory=list)
    alignment_heads: list[list[int]] = field(default_factory=list)
    lang_to_id: dict[str, int] = field(default_factory=dict)
    task_to_id: dict[str, int] = field(default_factory=dict)
    is_multilingual: bool = False

    def __post_init__(self) -> None:
        for name in ("n_mels", "vocab_size", "d_model", "encoder_layers", "decoder_layers",
                     "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim",
                     "decoder_ffn_dim", "max_source_positions", "max_target_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"WhisperConfig.{name} must be a positive int, got {value!r}")
        for heads in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, heads):
                raise ValueError(
                    f"WhisperConfig: d_model={self.d_model} is not divisible by "
                    f"{heads}={getattr(self, heads)}"
                )

    # -- derived ----------------------------------------------------------------------------
    @property
    def encoder_head_dim(self) -> int:
        return self.d_model // self.encoder_attention_heads

    @property
    def decoder_head_dim(self) -> int:
        return self.d_model // self.decoder_attention_heads

    @property
    def timestamp_begin(self) -> int | None:
        """Id of ``<|0.00|>``: the timestamp tokens follow ``<|notimestamps|>``."""
        return None if self.no_timestamps_token_id is None else self.no_timestamps_token_id + 1

    # -- the key contract -------------------------------------------------------------------
    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter name of the model and its shape (the converters' target)."""
        d = self.d_model
        shapes: dict[str, tuple[int, ...]] = {
            "encoder.conv1.weight": (d, self.n_mels, 3),
            "encoder.conv1.bias": (d,),
            "encoder.conv2.weight": (d, d, 3),
            "encoder.conv2.bias": (d,),
            "encoder.embed_positions.weight": (self.max_source_positions, d),
        }
        for i in range(self.encoder_layers):
            p = f"encoder.layers.{i}."
            shapes.update(_attention_shapes(p + "self_attn.", d))
            shapes.update(_norm_shapes(p + "self_attn_layer_norm.", d))
            shapes.update(_ffn_shapes(p, d, self.encoder_ffn_dim))
        shapes.update(_norm_shapes("encoder.layer_norm.", d))
        shapes["decoder.embed_tokens.weight"] = (self.vocab_size, d)
        shapes["decoder.embed_positions.weight"] = (self.max_target_positions, d)
        for i in range(self.decoder_layers):
            p = f"decoder.layers.{i}."
            shapes.update(_attention_shapes(p + "self_attn.", d))
            shapes.update(_norm_shapes(p + "self_attn_layer_norm.", d))
            shapes.update(_attention_shapes(p + "encoder_attn.", d))
            shapes.update(_norm_shapes(p + "encoder_attn_layer_norm.", d))
            shapes.update(_ffn_shapes(p, d, self.decoder_ffn_dim))
        shapes.update(_norm_shapes("decoder.layer_norm.", d))
        return shapes

    # -- prompts ----------------------------------------------------------------------------
    def prompt_ids(self, task: str | None = None, language: str | None = None) -> list[int]:
        """The SOT prompt with the task and/or language slot substituted.

        Slots are found by the token in them being one of the checkpoint's task / language
        ids, so the substitution never depends on fixed positions or numbers, and the result
        has the same length as ``sot_sequence`` (a mixed batch prefills as one tensor).

        Raises:
            ValueError: unknown task or language, or a slot the checkpoint's prompt lacks
                (an English-only model has neither; ``language="en"`` is accepted there).
        """
        if not self.sot_sequence:
            raise ValueError("this WhisperConfig has no sot_sequence; convert the checkpoint first")
        ids = list(self.sot_sequence)
        if task is not None:
            if task not in TASKS:
                raise ValueError(f"unknown Whisper task {task!r}; valid: {', '.join(TASKS)}")
            slot = _slot(ids, set(self.task_to_id.values()))
            if slot is None:
                if task != "transcribe":
                    raise ValueError(
                        f"task {task!r} needs a multilingual Whisper; this checkpoint's prompt "
                        f"has no task slot (English-only model); {multilingual_suggestion()}"
                    )
            else:
                if task not in self.task_to_id:
                    raise ValueError(f"this checkpoint has no token for task {task!r}")
                ids[slot] = self.task_to_id[task]
        if language is not None:
            code = language.strip().lower()
            slot = _slot(ids, set(self.lang_to_id.values()))
            if slot is None:
                if code != "en":
                    raise ValueError(
                        f"language {language!r} needs a multilingual Whisper; this checkpoint "
                        f"is English-only; {multilingual_suggestion()}"
                    )
            else:
                if code not in self.lang_to_id:
                    valid = ", ".join(sorted(self.lang_to_id))
                    raise ValueError(f"unknown language {language!r} for this checkpoint; valid: "
                                     f"{valid}")
                ids[slot] = self.lang_to_id[code]
        return ids

    # -- checks and (de)serialisation --------------------------------------------------------
    def validate(self) -> None:
        """Check the decoding metadata a converter filled in (ids in range, prompt present)."""
        problems: list[str] = []
        for name in ("decoder_start_token_id", "eos_token_id", "pad_token_id",
                     "no_timestamps_token_id"):
            value = getattr(self, name)
            if value is None:
                problems.append(f"{name} is not set")
            elif not 0 <= value < self.vocab_size:
                problems.append(f"{name}={value} is outside the vocabulary ({self.vocab_size})")
        ids = {
            "sot_sequence": self.sot_sequence,
            "suppress_tokens": self.suppress_tokens,
            "begin_suppress_tokens": self.begin_suppress_tokens,
            "lang_to_id": list(self.lang_to_id.values()),
            "task_to_id": list(self.task_to_id.values()),
        }
        for name, values in ids.items():
            bad = [v for v in values if not 0 <= v < self.vocab_size]
            if bad:
                problems.append(f"{name} has ids outside the vocabulary: {bad[:5]}")
        if not self.sot_sequence:
            problems.append("sot_sequence is empty")
        elif self.sot_sequence[0] != self.decoder_start_token_id:
            problems.append("sot_sequence does not start with decoder_start_token_id")
        for pair in self.alignment_heads:
            layer, head = pair
            if not (0 <= layer < self.decoder_layers and 0 <= head < self.decoder_attention_heads):
                problems.append(f"alignment head {pair} is outside the decoder")
        if problems:
            raise ValueError("invalid WhisperConfig: " + "; ".join(problems))

    def __str__(self) -> str:
        kind = "multilingual" if self.is_multilingual else "English-only"
        return (
            f"Whisper({kind}, d_model={self.d_model}, layers={self.encoder_layers}+"
            f"{self.decoder_layers}, heads={self.encoder_attention_heads}/"
            f"{self.decoder_attention_heads}, n_mels={self.n_mels}, vocab={self.vocab_size})"
        )


def _slot(ids: list[int], candidates: set[int]) -> int | None:
    hits = [i for i, t in enumerate(ids) if t in candidates]
    return hits[0] if hits else None


def _attention_shapes(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    # Whisper's key projection has no bias.
    return {
        prefix + "q_proj.weight": (d, d),
        prefix + "q_proj.bias": (d,),
        prefix + "k_proj.weight": (d, d),
        prefix + "v_proj.weight": (d, d),
        prefix + "v_proj.bias": (d,),
        prefix + "out_proj.weight": (d, d),
        prefix + "out_proj.bias": (d,),
    }


def _norm_shapes(prefix: str, d: int) -> dict[str, tuple[int, ...]]:
    return {prefix + "weight": (d,), prefix + "bias": (d,)}


def _ffn_shapes(prefix: str, d: int, ffn: int) -> dict[str, tuple[int, ...]]:
    return {
        prefix + "fc1.weight": (ffn, d),
        prefix + "fc1.bias": (ffn,),
        prefix + "fc2.weight": (d, ffn),
        prefix + "fc2.bias": (d,),
        **_norm_shapes(prefix + "final_layer_norm.", d),
    }
