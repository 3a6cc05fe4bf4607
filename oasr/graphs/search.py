"""The CPU search (``oasr._C.wfst``, oasr/csrc/host/wfst/faster_decoder.h: Kaldi's FasterDecoder)
and what a best path means: the tokens it emits, their frames, its words.

A path consumes one emitting arc per decoded frame. Its tokens are read off those arcs by the
graph's ``token_rule``:

- ``entered`` (graphs built here, WeNet's compact topology): a token starts where a non-blank
  arc enters a state; a self-loop continues the token before it, so two equal tokens with no
  blank between them are two tokens when the path left the first one's state;
- ``collapse`` (graphs from elsewhere: Kaldi's or k2's topologies): the CTC rule over the
  decoded frames' labels, repeats merged and blanks dropped.

A token's frame is the first frame of its run. Words are the path's output labels in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oasr.native import native

__all__ = ["SearchOptions", "WfstPath", "decode_rows", "TOKEN_RULES", "read_tokens",
           "segment_words", "path_from_arcs", "decoded_frames", "STATUS"]

# The device search's per-row status bits (oasr/csrc/kernels/wfst/token_passing.cuh).
STATUS = {"reached_final": 1, "tokens_overflow": 2, "arena_overflow": 4, "path_overflow": 8,
          "no_token": 16}

TOKEN_RULES = ("entered", "collapse")


@dataclass(frozen=True)
class SearchOptions:
    """The search's knobs (Kaldi's FasterDecoder options plus the CTC blank handling)."""

    beam: float = 16.0
    max_active: int = 2**31 - 1
    min_active: int = 20
    beam_delta: float = 0.5
    acoustic_scale: float = 1.0
    blank_penalty: float = 0.0
    blank: int = 0
    blank_skip_threshold: float = 1.0

    def native(self) -> Any:
        o = native("wfst").DecoderOptions()
        o.beam, o.max_active, o.min_active = self.beam, self.max_active, self.min_active
        o.beam_delta, o.acoustic_scale = self.beam_delta, self.acoustic_scale
        o.blank_penalty, o.blank = self.blank_penalty, self.blank
        o.blank_skip_threshold = self.blank_skip_threshold
        return o


@dataclass
class WfstPath:
    """One row's best path. ``labels``/``frames``/``entered`` per decoded frame: the emitting
    arc's token, the frame's index in the row's log-probs and whether the arc entered its state
    from another; ``words`` the output labels, ``word_steps`` the index (into ``labels``) of the
    last decoded frame at or before each one's arc."""

    ok: bool
    reached_final: bool
    cost: float
    labels: np.ndarray
    frames: np.ndarray
    entered: np.ndarray
    words: np.ndarray
    word_steps: np.ndarray

    @classmethod
    def from_native(cls, t: tuple) -> WfstPath:
        return cls(bool(t[0]), bool(t[1]), float(t[2]), *t[3:])

    @classmethod
    def empty(cls) -> WfstPath:
        z = np.zeros(0, dtype=np.int32)
        return cls(False, False, float("inf"), z, z, z.astype(np.uint8), z, z)


def read_tokens(path: WfstPath, blank: int, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """The path's tokens and each one's first frame, by ``rule`` (see the module docstring)."""
    labels = path.labels
    if rule == "entered":
        starts = (labels != blank) & (path.entered != 0)
    elif rule == "collapse":
        prev = np.concatenate([[-1], labels[:-1]]) if len(labels) else labels
        starts = (labels != blank) & (labels != prev)
    else:
        raise ValueError(f"unknown token rule {rule!r}; valid: {', '.join(TOKEN_RULES)}")
    return labels[starts].astype(np.int64), path.frames[starts].astype(np.int64)


def segment_words(tokens: Sequence[int], words: Sequence[str],
                  spellings: dict[str, list[tuple[int, ...]]]) -> list[int] | None:
    """The index of each word's first token when ``tokens`` is the words' spellings one after
    another (a word with several spellings takes the one that fits); ``None`` when no choice
    of spellings gives ``tokens``."""
    tokens = tuple(tokens)
    n = len(words)
    # reach[i]: the token offsets where words[:i] can end.
    reach: list[dict[int, int]] = [{0: -1}] + [{} for _ in range(n)]
    for i, word in enumerate(words):
        for at in reach[i]:
            for sp in spellings.get(word, ()):
                if tokens[at:at + len(sp)] == sp:
                    reach[i + 1].setdefault(at + len(sp), at)
    if len(tokens) not in reach[n]:
        return None
    starts, at = [], len(tokens)
    for i in range(n, 0, -1):
        at = reach[i][at]
        starts.append(at)
    return starts[::-1]


def path_from_arcs(graph: Any, arcs: np.ndarray, frames: np.ndarray, cost: float,
                   reached_final: bool) -> WfstPath:
    """A path given as its arcs (emitting arc a as a >= 0, epsilon arc a as -(a + 2); last
    first, as the device search writes them) and the frames its emitting arcs decoded.
    ``graph``: the ``DecodingGraph``."""
    codes = np.asarray(arcs, dtype=np.int64)[::-1]
    emit = codes >= 0
    e, n = codes[emit], -codes[~emit] - 2
    nxt = np.empty(len(codes), dtype=np.int64)
    out = np.empty(len(codes), dtype=np.int32)
    nxt[emit], nxt[~emit] = graph.emit_next[e], graph.eps_next[n]
    out[emit], out[~emit] = graph.emit_olabel[e], graph.eps_olabel[n]
    src = np.concatenate([[graph.start], nxt[:-1]])
    steps = np.cumsum(emit) - 1
    has_word = out != 0
    if int(emit.sum()) != len(frames):
        raise RuntimeError(f"wfst: a path of {int(emit.sum())} emitting arcs for "
                           f"{len(frames)} decoded frames")
    return WfstPath(True, reached_final, float(cost), (graph.emit_ilabel[e] - 1).astype(np.int32),
                    np.asarray(frames, dtype=np.int32), (nxt[emit] != src[emit]).astype(np.uint8),
                    out[has_word], steps[has_word].astype(np.int32))


def decoded_frames(blank_log_probs: np.ndarray, argmax: np.ndarray, length: int, blank: int,
                   threshold: float) -> np.ndarray:
    """The frames the search decodes under blank skipping (oasr/csrc/host/wfst/faster_decoder.h's
    rule, vectorised): those whose blank probability is at most ``threshold``, and before one whose
    argmax repeats the previous decoded frame's non-blank argmax right after a skip, the
    skipped frame just before it."""
    if threshold >= 1.0 or length <= 0:
        return np.arange(max(length, 0), dtype=np.int32)
    skip = np.exp(blank_log_probs[:length].astype(np.float64)) > threshold
    t = np.arange(length)
    decoded = ~skip
    last = np.maximum.accumulate(np.where(decoded, t, -1))
    prev = np.concatenate([[-1], last[:-1]])  # the last decoded frame before t
    am = argmax[:length]
    prev_best = np.where(prev >= 0, am[np.maximum(prev, 0)], -1)
    after_skip = np.concatenate([[False], skip[:-1]])
    replay = decoded & after_skip & (am != blank) & (am == prev_best)
    return np.sort(np.concatenate([t[decoded], t[replay] - 1])).astype(np.int32)


def decode_rows(graph: Any, log_probs: np.ndarray, lens: np.ndarray, options: SearchOptions,
                boosting: Sequence[Any] | None = None, num_threads: int = 1) -> list[WfstPath]:
    """(B, T, V) float32 log-probs, (B,) lengths -> each row's best path. ``graph``: an
    ``oasr._C.wfst.Graph``; ``boosting``: none, or one ``oasr._C.wfst.Boosting`` (or None) per
    row."""
    rows = native("wfst").decode(graph, log_probs, lens, options.native(), list(boosting or []),
                                 num_threads)
    return [WfstPath.from_native(r) for r in rows]
