"""Long recordings: cutting them into overlapping model windows and stitching the transcripts.

Whisper reads at most ``window_s`` (30 s) of audio per forward. A longer recording is cut by
:func:`plan_windows` into windows that advance by ``stride = window_s - overlap_s``; every window
is full-length (the last one is shifted left so it ends at the recording's end), so consecutive
windows share ``overlap_s`` seconds, except the last pair, which may share more (the shifted last
window) or a little less (a tail shorter than ``min_last_s`` is absorbed by sliding the previous
window right instead of paying for one more, almost redundant, window).

Each window is decoded on its own; :func:`stitch` joins the window transcripts on the recording's
clock, with no duplicated or lost words at the seams. For each pair of consecutive windows A, B:

1. The seam is the middle of their overlap, ``(B.start + A.end) / 2``.
2. Words are compared in normalized form (case-folded, punctuation removed); output keeps the
   original tokens. Every word gets a time: its given time when ``WindowText.words`` carries one,
   otherwise a uniform estimate over its window. Decoder times also veto matches between words
   heard more than 2 s apart.
3. Only the tail of A and the head of B that can lie in the overlap are aligned: the words within
   ``pad = overlap + 4 / rate`` seconds of it, ``rate`` being the larger of the two windows'
   words per second (about twice the expected overlap words plus four).
4. The tail and head are aligned as an overlap alignment: a suffix of the tail against a prefix
   of the head, scoring +2 per matched word and -1 per substitution, insertion or deletion,
   while tail words before the overlap and head words after it are free. Unlike a bare longest
   common run, this only accepts matches whose surroundings agree, so a repeated phrase ("of
   the") away from the window edges cannot pull the cut, and a mis-recognized word inside the
   overlap costs a point instead of breaking the match. With a score of at least 2, the cut is at
   the middle of the alignment's longest run of consecutive matches (ties: the run nearest the
   seam): A is kept before it, B from it on. A word mis-recognized, dropped or cut off at a
   window edge lies in a discarded half, so it does not reach the output.
5. With a lower score there is no trustworthy shared word: the overlap is silent (or empty) in at
   least one window, or nothing in it was recognized alike. With decoder word times on both sides,
   the time split applies: A keeps its words timed before the seam, B its words from the seam on.
   Without them both sides are kept whole: a uniform estimate puts words that precede a pause
   inside the overlap, and splitting on it drops them (about one word in six on LibriSpeech with a
   silent seam every 25 s), while keeping both duplicates words only when both windows heard the
   same speech yet recognized none of it alike. Known limit of the untimed path: in a silent
   overlap, words that happen to repeat across the pause right at the window edges (A's last word
   and B's first, or a short common phrase) read as shared, and one copy is lost.

Words already claimed by the previous seam are never offered to the next one, so heavily
overlapping windows (the shifted last window) cannot emit a word twice. Each window yields one
segment holding the words it contributed, timed from the previous seam to the next (the first
starts at the first window's start, the last ends at the last window's end), so segments tile the
recording contiguously and their texts join to the full text.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TypedDict

# Word matching never needs more than this many words per side; it bounds the O(n * m) alignment
# when a caller passes an absurd overlap.
_MAX_ALIGN_WORDS = 512
# With decoder word times, two same-looking words further apart than this are different words.
_TIME_TOLERANCE_S = 2.0
# Alignment score of a matched word; every substitution, insertion or deletion costs 1. Two shared
# words then outweigh a garbled word at each window edge, and an alignment is trusted only if it
# is worth at least one unopposed match.
_MATCH = 2


@dataclass(frozen=True)
class Window:
    """One model window, ``[start, end]`` seconds on the recording clock."""

    index: int
    start: float
    end: float

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"Window index must be >= 0, got {self.index}")
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValueError(f"Window bounds must be finite, got [{self.start}, {self.end}]")
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"Window needs 0 <= start <= end, got [{self.start}, {self.end}]")

    @property
    def duration(self) -> float:
        return self.end - self.start

    def sample_slice(self, sample_rate: int) -> slice:
        """The window's samples in a ``(T,)`` waveform at ``sample_rate`` Hz."""
        return slice(round(self.start * sample_rate), round(self.end * sample_rate))


def plan_windows(
    duration_s: float,
    window_s: float = 30.0,
    overlap_s: float = 5.0,
    min_last_s: float = 1.0,
) -> list[Window]:
    """Cuts ``[0, duration_s]`` into full-length windows of ``window_s`` overlapping by
    ``overlap_s``.

    A recording no longer than ``window_s`` is one window ``[0, duration_s]``. Otherwise windows
    start every ``window_s - overlap_s`` seconds and the last is shifted left to end at
    ``duration_s``. When the last window would add less than ``min_last_s`` seconds beyond its
    predecessor, that sliver is merged into the predecessor by sliding it right instead, provided
    it keeps at least half the overlap with the window before it (the first window never slides:
    it must start at 0).
    """
    for name, value in (
        ("duration_s", duration_s),
        ("window_s", window_s),
        ("overlap_s", overlap_s),
        ("min_last_s", min_last_s),
    ):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
    if duration_s < 0:
        raise ValueError(f"duration_s must be >= 0, got {duration_s}")
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    if overlap_s < 0 or overlap_s >= window_s:
        raise ValueError(
            f"overlap_s must satisfy 0 <= overlap_s < window_s ({window_s}), got {overlap_s}"
        )
    if min_last_s < 0:
        raise ValueError(f"min_last_s must be >= 0, got {min_last_s}")

    # A tail within rounding error of a window's end is no tail.
    reach = duration_s - 1e-9 * max(1.0, duration_s)
    if reach <= window_s:
        return [Window(0, 0.0, float(duration_s))]
    stride = window_s - overlap_s
    # Multiples of the stride rather than a running sum, so long recordings do not drift.
    count = 1
    while (count - 1) * stride + window_s < reach:
        count += 1
    starts = [k * stride for k in range(count)]
    # Audio the last window adds beyond its predecessor: (0, stride] by construction.
    tail = duration_s - (starts[-2] + window_s)
    if count >= 3 and tail < min_last_s and tail <= overlap_s / 2:
        starts.pop()
    starts[-1] = duration_s - window_s
    ends = [s + window_s for s in starts[:-1]] + [duration_s]
    # Rounding in k * stride can open a hair-wide gap when the overlap is zero; close it.
    for k in range(1, len(starts)):
        starts[k] = min(starts[k], ends[k - 1])
    return [
        Window(i, float(s), float(e)) for i, (s, e) in enumerate(zip(starts, ends, strict=True))
    ]


@dataclass
class WindowText:
    """A window's transcript. ``words``, when given, holds ``(token, start, end)`` with times on
    the recording clock (either may be None); its tokens then replace ``text.split()``."""

    window: Window
    text: str
    words: list[tuple[str, float | None, float | None]] | None = None


class Segment(TypedDict):
    start: float
    end: float
    text: str


@dataclass
class StitchResult:
    """The recording's transcript and one segment per window (the words it contributed)."""

    text: str
    segments: list[Segment] = field(default_factory=list)


def normalize_word(token: str) -> str:
    """The comparison form of a token: case-folded, punctuation removed ("Don't," -> "dont")."""
    return "".join(c for c in token.casefold() if not unicodedata.category(c).startswith("P"))


@dataclass
class _Words:
    """A window's tokens, their normalized forms and their (nondecreasing) times in seconds."""

    tokens: list[str]
    norms: list[str]
    times: list[float]
    timed: bool  # times came from the decoder rather than a uniform estimate

    @property
    def comparable(self) -> list[int]:
        """Indices of tokens that take part in matching (punctuation-only tokens do not)."""
        return [k for k, n in enumerate(self.norms) if n]


def _words_of(piece: WindowText) -> _Words:
    w = piece.window
    if piece.words is None:
        tokens = piece.text.split()
        n = len(tokens)
        times = [w.start + (k + 0.5) * w.duration / n for k in range(n)]
    else:
        kept = [(tok.strip(), s, e) for tok, s, e in piece.words if tok.strip()]
        tokens = [t for t, _, _ in kept]
        times = _interpolate([_mid(s, e) for _, s, e in kept], w.start, w.end)
    # Decoders can emit slightly non-monotone times; seam logic assumes word order == time order.
    for k in range(1, len(times)):
        times[k] = max(times[k], times[k - 1])
    return _Words(tokens, [normalize_word(t) for t in tokens], times, piece.words is not None)


def _mid(start: float | None, end: float | None) -> float | None:
    if start is not None and end is not None:
        return 0.5 * (start + end)
    return start if start is not None else end


def _interpolate(times: list[float | None], lo: float, hi: float) -> list[float]:
    """Fills missing times linearly between known neighbours (window bounds at the ends)."""
    n = len(times)
    known = [(-1, lo)] + [(k, t) for k, t in enumerate(times) if t is not None] + [(n, hi)]
    out = [0.0] * n
    for (k0, t0), (k1, t1) in pairwise(known):
        if 0 <= k0 < n:
            out[k0] = t0
        for k in range(k0 + 1, k1):
            out[k] = t0 + (t1 - t0) * (k - k0) / (k1 - k0)
    return out


def _overlap_alignment(same: list[list[bool]], m: int) -> tuple[int, list[tuple[int, int]]]:
    """Best alignment of a suffix of sequence A (``len(same)`` words) with a prefix of sequence B
    (``m`` words), ``same[i][j]`` saying whether A's word i matches B's word j. Scores: match
    ``_MATCH``, substitution, insertion or deletion -1; A's prefix and B's suffix are free.
    Returns the score and the matched ``(i, j)`` pairs in order. O(len(A) * m)."""
    n = len(same)
    score = [[0] * (m + 1) for _ in range(n + 1)]
    score[0] = [-j for j in range(m + 1)]
    for i in range(1, n + 1):
        row, up, hits = score[i], score[i - 1], same[i - 1]
        for j in range(1, m + 1):
            diag = up[j - 1] + (_MATCH if hits[j - 1] else -1)
            row[j] = max(diag, up[j] - 1, row[j - 1] - 1)
    best_j = max(range(m + 1), key=lambda j: score[n][j])
    pairs = []
    i, j = n, best_j
    while j > 0:
        here = score[i][j]
        hit = i > 0 and same[i - 1][j - 1]
        if i > 0 and here == score[i - 1][j - 1] + (_MATCH if hit else -1):
            if hit:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and here == score[i - 1][j] - 1:
            i -= 1
        else:
            j -= 1
    return score[n][best_j], pairs[::-1]


def _runs(pairs: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Splits matched pairs into runs of consecutive words on both sides."""
    runs: list[list[tuple[int, int]]] = []
    for i, j in pairs:
        if runs and runs[-1][-1] == (i - 1, j - 1):
            runs[-1].append((i, j))
        else:
            runs.append([(i, j)])
    return runs


def _cut(a: _Words, b: _Words, wa: Window, wb: Window, a_from: int) -> tuple[int, int]:
    """Where to cut the seam between consecutive windows: A keeps ``tokens[a_from:a_cut]``,
    B keeps ``tokens[b_start:]`` (before B's own right seam)."""
    overlap = wa.end - wb.start
    seam = 0.5 * (wb.start + wa.end)
    a_idx = [k for k in a.comparable if k >= a_from]
    b_idx = b.comparable
    if overlap <= 0 or not a_idx or not b_idx:
        return len(a.tokens), 0

    # Words per second; the busier window sets the margin so neither side is cut short.
    rate = max(len(a.comparable) / max(wa.duration, 1e-6), len(b_idx) / max(wb.duration, 1e-6))
    pad = overlap + 4.0 / rate
    tail = [k for k in a_idx if a.times[k] >= wb.start - pad][-_MAX_ALIGN_WORDS:]
    head = [k for k in b_idx if b.times[k] <= wa.end + pad][:_MAX_ALIGN_WORDS]
    # Decoder times let the matcher refuse a look-alike far from where the word was heard.
    timed = a.timed and b.timed
    same = [
        [
            a.norms[ka] == b.norms[kb]
            and (not timed or abs(a.times[ka] - b.times[kb]) <= _TIME_TOLERANCE_S)
            for kb in head
        ]
        for ka in tail
    ]
    total, pairs = _overlap_alignment(same, len(head))
    if total >= _MATCH:

        def key(run: list[tuple[int, int]]) -> tuple[int, float]:
            i, j = run[len(run) // 2]
            return -len(run), abs(0.5 * (a.times[tail[i]] + b.times[head[j]]) - seam)

        run = min(_runs(pairs), key=key)
        i, j = run[len(run) // 2]
        return tail[i], head[j]

    if not timed:
        # No shared word, most likely because the overlap is silent in one window: dropping words
        # by uniform time estimates would lose real words, so both sides are kept.
        return len(a.tokens), 0
    a_cut = next((k for k in range(a_from, len(a.tokens)) if a.times[k] >= seam), len(a.tokens))
    b_start = next((k for k in range(len(b.tokens)) if b.times[k] >= seam), len(b.tokens))
    return a_cut, b_start


def _check_order(pieces: list[WindowText]) -> None:
    for prev, nxt in pairwise(pieces):
        p, n = prev.window, nxt.window
        if not (n.start > p.start and n.end > p.end):
            raise ValueError(
                f"windows must be in recording order with increasing start and end, got "
                f"{p} then {n}"
            )
        if n.start > p.end:
            raise ValueError(f"windows leave a gap ({p.end} s to {n.start} s): audio was lost")


def stitch(pieces: list[WindowText]) -> StitchResult:
    """Joins consecutive window transcripts into the recording's transcript (see module doc)."""
    if not pieces:
        return StitchResult("", [])
    _check_order(pieces)
    words = [_words_of(p) for p in pieces]

    # keep[i] = [first, stop) token range window i contributes.
    keep = [[0, len(w.tokens)] for w in words]
    for i in range(len(pieces) - 1):
        a_cut, b_start = _cut(
            words[i], words[i + 1], pieces[i].window, pieces[i + 1].window, keep[i][0]
        )
        keep[i][1] = a_cut
        keep[i + 1][0] = b_start

    seams = [0.5 * (nxt.window.start + prev.window.end) for prev, nxt in pairwise(pieces)]
    bounds = [pieces[0].window.start, *seams, pieces[-1].window.end]
    segments: list[Segment] = []
    for i, w in enumerate(words):
        first, stop = keep[i]
        text = " ".join(w.tokens[first:stop])
        segments.append(Segment(start=bounds[i], end=bounds[i + 1], text=text))
    return StitchResult(" ".join(s["text"] for s in segments if s["text"]), segments)
