"""``NemotronStreamingConfig``: the cache-aware FastConformer (NVIDIA Nemotron streaming RNN-T).

The FastConformer fields (``oasr.models.fastconformer.config``) plus the cache-aware attention
context: every query attends its own chunk of ``lookahead + 1`` frames and the
``left_context // (lookahead + 1)`` chunks before it, so one chunk of audio can be encoded
with only a cache of the last ``left_context`` frames. The subsampling and the depthwise
convolution are causal and the convolution module normalises with LayerNorm.

A prompted checkpoint (Nemotron 3.5 ASR, transformers' ``Nemotron3_5AsrForRNNT``) also carries
``num_prompts`` language-prompt slots: the target language's one-hot is concatenated to every
encoder frame and fused back to ``d_model`` by a two-layer ReLU MLP before the joint;
``prompt_dictionary`` maps language strings to slots (``default_prompt_id`` when none is
asked: the checkpoint's ``auto`` slot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from oasr.models.fastconformer.config import FastConformerConfig

__all__ = ["NemotronStreamingConfig"]


@dataclass
class NemotronStreamingConfig(FastConformerConfig):
    """``left_context``: cached encoder frames (transformers' ``sliding_window - 1``);
    ``lookahead``: right context in frames, so a chunk is ``lookahead + 1`` frames
    (``default_num_lookahead_tokens``); ``lookaheads``: the right contexts the checkpoint was
    trained with (any of them may be chosen per run); ``num_prompts`` (0: no prompt
    conditioning), ``prompt_hidden``, ``default_prompt_id``, ``prompt_dictionary``: the
    language prompt of a prompted checkpoint."""

    head: str = "rnnt"
    left_context: int = 70
    lookahead: int = 13
    lookaheads: tuple[int, ...] = (13, 6, 1, 0)
    num_prompts: int = 0
    prompt_hidden: int = 2048
    default_prompt_id: int = 101
    prompt_dictionary: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        problems = []
        if self.head != "rnnt":
            problems.append(f"head={self.head!r} (the streaming checkpoints are RNN-T)")
        if self.left_context < 0 or self.lookahead < 0:
            problems.append(f"left_context={self.left_context}, lookahead={self.lookahead} "
                            "(each >= 0)")
        if self.num_prompts:
            bad = {k: v for k, v in self.prompt_dictionary.items()
                   if not 0 <= int(v) < self.num_prompts}
            if bad or not 0 <= self.default_prompt_id < self.num_prompts:
                problems.append(f"prompt slots {bad or self.default_prompt_id} outside "
                                f"num_prompts={self.num_prompts}")
        if problems:
            raise ValueError("NemotronStreamingConfig: " + "; ".join(problems))
        self.lookaheads = tuple(int(r) for r in self.lookaheads)
        self.prompt_dictionary = {str(k): int(v) for k, v in self.prompt_dictionary.items()}

    @property
    def chunk_frames(self) -> int:
        return self.lookahead + 1

    @property
    def subsampled_bins(self) -> int:
        """Feature bins after the causal stages: padded ``(k - 1, s - 1)`` on the bin axis."""
        f, k = self.num_mel_bins, self.subsampling_kernel
        for _ in range(int(math.log2(self.subsampling_factor))):
            f = (f + (k - 1) + 1 - k) // 2 + 1
        return f

    def first_chunk_features(self, lookahead: int | None = None) -> int:
        """Feature frames of the first chunk: ``1 + factor * lookahead``."""
        r = self.lookahead if lookahead is None else lookahead
        return 1 + self.subsampling_factor * r

    def chunk_features(self, lookahead: int | None = None) -> int:
        """Feature frames of every later chunk: ``factor * (lookahead + 1)``."""
        r = self.lookahead if lookahead is None else lookahead
        return self.subsampling_factor * (r + 1)
