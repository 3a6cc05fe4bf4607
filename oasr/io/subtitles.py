"""Subtitle cues from word timings, and their SRT and WebVTT text.

A cue is a run of consecutive words shown together. :func:`build_cues` walks the words left to
right and closes the open cue *before* a word when the pause ahead of it is at least
``min_gap_s``, when the cue would then last longer than ``max_duration_s``, or when its text
would no longer wrap onto ``max_lines`` lines of ``max_chars``; and *after* a word that ends a
sentence. A word is never split, so a word longer than a line is a cue of its own.

All times are whole milliseconds (what both formats can say); cues come out in order, never
overlapping (an end past the next cue's start is pulled back to it) and never ending before
they start. A cue shorter than ``min_duration_s`` (word times collapse on slow or mumbled
speech) is lengthened into the pauses around it, its end first, as far as they reach: it never
overlaps a neighbour, so between two cues with no pause it stays as it is.

``highlight_words`` (whisper's ``--highlight_words``): each cue is shown once per word, that
word underlined (``<u>...</u>``, which SRT players and WebVTT both read) while it is spoken, the
plain text in the pauses between words.

Words are joined with one space, except where the script writes none: two neighbouring
characters of a space-less script (CJK ideographs, kana, Hangul, the same class the word-timing
pass splits into one word per character), or a full-width punctuation mark next to anything
(it carries its own spacing).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "SENTENCE_ENDS",
    "TITLE_ABBREVIATIONS",
    "Cue",
    "CueOptions",
    "build_cues",
    "ends_sentence",
    "join_words",
    "render",
    "to_srt",
    "to_vtt",
    "words_from_text",
]

SENTENCE_ENDS = (".", "?", "!", "…", "。", "？", "！")
# English titles that precede a name: their full stop does not end the sentence ("Mr. Hale").
TITLE_ABBREVIATIONS = frozenset(
    {"mr.", "mrs.", "ms.", "mx.", "dr.", "prof.", "st.", "rev.", "messrs.", "mme.", "mlle."}
)
_SPACELESS = 2  # oasr._C.alignment.classify's class of a space-less script's code point


@dataclass(frozen=True)
class CueOptions:
    """How words are grouped into cues.

    * ``max_chars``: characters (code points) per line;
    * ``max_lines``: lines per cue; a cue's text wraps at word boundaries onto at most this many
      lines of at most ``max_chars`` (a word longer than a line is a cue of its own);
    * ``max_duration_s``: longest cue (a word lasting longer is a cue of its own);
    * ``min_gap_s``: a pause at least this long between two words starts a new cue;
    * ``min_duration_s``: a shorter cue is lengthened into the pauses beside it;
    * ``highlight_words``: a cue per word, the word spoken underlined.

    A word ending a sentence (:data:`SENTENCE_ENDS`, a title such as "Mr." excepted, see
    :data:`TITLE_ABBREVIATIONS`) always ends its cue.
    """

    max_chars: int = 42
    max_lines: int = 2
    max_duration_s: float = 7.0
    min_gap_s: float = 0.6
    min_duration_s: float = 0.8
    highlight_words: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"max_chars (--max-cue-chars) must be >= 1, got {self.max_chars}")
        if self.max_lines < 1:
            raise ValueError(f"max_lines (--max-line-count) must be >= 1, got {self.max_lines}")
        if not 0 <= self.min_duration_s < math.inf:
            raise ValueError(f"min_duration_s (--min-cue-seconds) must be a number >= 0, got "
                             f"{self.min_duration_s}")
        # Finite: an infinite limit has no millisecond value to cut at.
        if not 0 < self.max_duration_s < math.inf:
            raise ValueError(
                f"max_duration_s (--max-cue-seconds) must be a number > 0, got "
                f"{self.max_duration_s}"
            )
        if not 0 <= self.min_gap_s < math.inf:
            raise ValueError(f"min_gap_s (--cue-gap) must be a number >= 0, got {self.min_gap_s}")

    def __str__(self) -> str:
        return (
            f"cues of <= {self.max_lines} x {self.max_chars} chars, <= {self.max_duration_s:g} s, "
            f"cut at pauses >= {self.min_gap_s:g} s and sentence ends, >= "
            f"{self.min_duration_s:g} s where the pauses allow"
            + (", words highlighted" if self.highlight_words else "")
        )


@dataclass(frozen=True)
class Cue:
    """One subtitle: ``start``/``end`` in seconds (whole milliseconds); ``text`` its lines
    joined with ``\\n``; ``underline``: the (start, end) character offsets in ``text`` of a
    word shown underlined (``highlight_words``)."""

    start: float
    end: float
    text: str
    underline: tuple[int, int] | None = None


@dataclass
class _Word:
    text: str
    start: int  # ms
    end: int  # ms


# ----------------------------------------------------------------------- text rules


def _classes(codepoints: list[int]) -> np.ndarray:
    """Per code point: 0 other, 1 whitespace, 2 space-less script; the word-timing pass's own
    classifier, so joining undoes exactly the split it made."""
    from oasr.native import native

    return native("alignment").classify(np.asarray(codepoints, dtype=np.uint32))


def _wide_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P") and unicodedata.east_asian_width(ch) in "FW"


def _separators(texts: Sequence[str]) -> list[str]:
    """``seps[i]``: what goes between word ``i - 1`` and word ``i`` (``seps[0]`` is empty)."""
    if not texts:
        return []
    edges = _classes([ord(c) for t in texts for c in (t[0], t[-1])])
    seps = [""]
    for i in range(1, len(texts)):
        left, right = texts[i - 1][-1], texts[i][0]
        both_spaceless = edges[2 * i - 1] == _SPACELESS and edges[2 * i] == _SPACELESS
        seps.append("" if both_spaceless or _wide_punct(left) or _wide_punct(right) else " ")
    return seps


def join_words(texts: Sequence[str]) -> str:
    """Words (or phrases) joined as the script writes them: one space, none between two
    characters of a space-less script or next to a full-width punctuation mark."""
    texts = [t for t in texts if t]
    return "".join(sep + t for sep, t in zip(_separators(texts), texts))


def ends_sentence(text: str) -> bool:
    """Whether a word ends a sentence (a title such as "Mr." does not)."""
    return _ends_sentence(text)


def _ends_sentence(text: str) -> bool:
    # Closing quotes and brackets may follow the mark: `"Stop!"`, `(done.)`, `「はい。」`.
    end = len(text)
    while end and (text[end - 1] in "\"'" or unicodedata.category(text[end - 1]) in ("Pe", "Pf")):
        end -= 1
    core = text[:end]
    return core.endswith(SENTENCE_ENDS) and core.casefold() not in TITLE_ABBREVIATIONS


# ----------------------------------------------------------------------- line wrapping


def _line_count(lengths: Sequence[int], seps: Sequence[int], width: int) -> int:
    """Lines a greedy fill of ``width`` uses; greedy is optimal for the count. ``seps[i]`` is
    the length of the separator before word ``i``, dropped where a line breaks."""
    lines, used = 1, lengths[0]
    for length, sep in zip(lengths[1:], seps[1:]):
        if used + sep + length <= width:
            used += sep + length
        else:
            lines, used = lines + 1, length
    return lines


def _fits(lengths: Sequence[int], seps: Sequence[int], options: CueOptions) -> bool:
    return (
        max(lengths) <= options.max_chars
        and _line_count(lengths, seps, options.max_chars) <= options.max_lines
    )


def _wrap(texts: Sequence[str], seps: Sequence[str], options: CueOptions) -> str:
    """The words on as few lines as ``max_chars`` allows, the longest line as short as it can
    be, and the lower line the longer one where they differ (easier to read)."""
    lengths = [len(t) for t in texts]
    sep_lengths = [len(s) for s in seps]
    lines = _line_count(lengths, sep_lengths, max(options.max_chars, max(lengths)))
    width = max(lengths)
    while _line_count(lengths, sep_lengths, width) > lines:
        width += 1
    # Fill from the end at that width: the top line takes what is left over.
    out: list[list[int]] = [[len(texts) - 1]]
    used = lengths[-1]
    for i in range(len(texts) - 2, -1, -1):
        extra = sep_lengths[i + 1] + lengths[i]
        if used + extra <= width:
            out[-1].append(i)
            used += extra
        else:
            out.append([i])
            used = lengths[i]
    rendered = []
    for line in reversed(out):
        idx = sorted(line)
        rendered.append("".join((seps[i] if i != idx[0] else "") + texts[i] for i in idx))
    return "\n".join(rendered)


# ----------------------------------------------------------------------- cues


def _get(word: Any, name: str) -> Any:
    return word.get(name) if isinstance(word, Mapping) else getattr(word, name, None)


def _ms(seconds: Any) -> int | None:
    if seconds is None:
        return None
    value = float(seconds)
    if not math.isfinite(value):
        return None
    return int(math.floor(value * 1000.0 + 0.5))


def _clean(words: Iterable[Any]) -> list[_Word]:
    """Words with text, whitespace collapsed, times in ms: a missing start takes the previous
    word's end, a missing end the word's start; nothing before 0 or ending before it starts."""
    out: list[_Word] = []
    previous_end = 0
    for w in words:
        text = " ".join(str(_get(w, "word") or "").split())
        if not text:
            continue
        start = _ms(_get(w, "start"))
        start = previous_end if start is None else max(start, 0)
        end = _ms(_get(w, "end"))
        end = start if end is None else max(end, start)
        out.append(_Word(text, start, end))
        previous_end = end
    return out


def _settle(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Starts made non-decreasing, each end pulled back to the next start and kept >= its own
    start: cues in order and never overlapping (ms)."""
    starts: list[int] = []
    for start, _, _ in spans:
        starts.append(max(start, starts[-1]) if starts else start)
    out = []
    for k, (_, end, text) in enumerate(spans):
        if k + 1 < len(spans):
            end = min(end, starts[k + 1])
        out.append((starts[k], max(end, starts[k]), text))
    return out


def _lengthen(spans: list[tuple[int, int, str]], min_ms: int) -> list[tuple[int, int, str]]:
    """Cues shorter than ``min_ms`` lengthened into the pauses beside them, end first."""
    out = list(spans)
    for k, (start, end, text) in enumerate(out):
        if end - start >= min_ms:
            continue
        after = out[k + 1][0] if k + 1 < len(out) else start + min_ms
        end = max(end, min(start + min_ms, after))
        before = out[k - 1][1] if k else 0
        start = min(start, max(end - min_ms, before))
        out[k] = (start, end, text)
    return out


def _highlighted(start: int, end: int, text: str, words: list[_Word]) -> list[Cue]:
    """One cue per word of a cue spanning ``[start, end]`` ms, that word underlined while it
    is spoken; the plain text in the pauses between."""
    cues: list[Cue] = []
    pos, last = 0, start
    for w in words:
        at = text.find(w.text, pos)
        pos = at + len(w.text)
        a = max(w.start, last)
        b = min(max(w.end, a), end)
        if a > last:
            cues.append(Cue(last / 1000.0, a / 1000.0, text))
        if b > a:
            cues.append(Cue(a / 1000.0, b / 1000.0, text, (at, pos)))
        last = max(last, b)
    if last < end:
        cues.append(Cue(last / 1000.0, end / 1000.0, text))
    return cues


def build_cues(words: Iterable[Any], options: CueOptions | None = None) -> list[Cue]:
    """Cues from ``words``: dicts (or objects) with ``word``, ``start``, ``end`` in seconds, in
    spoken order. Greedy left to right; see the module docstring for the rules."""
    options = options or CueOptions()
    clean = _clean(words)
    if not clean:
        return []
    texts = [w.text for w in clean]
    seps = _separators(texts)
    gap_ms = _ms(options.min_gap_s)
    max_ms = _ms(options.max_duration_s)
    groups: list[tuple[int, int]] = []  # [first, last) word index of each cue
    first = 0
    for i in range(1, len(clean) + 1):
        if i == len(clean):
            groups.append((first, i))
            break
        word, previous = clean[i], clean[i - 1]
        cut = (
            _ends_sentence(previous.text)
            or word.start - previous.end >= gap_ms
            or word.end - clean[first].start > max_ms
            or not _fits(
                [len(t) for t in texts[first : i + 1]],
                [0] + [len(s) for s in seps[first + 1 : i + 1]],
                options,
            )
        )
        if cut:
            groups.append((first, i))
            first = i
    spans = []
    for a, b in groups:
        text = _wrap(texts[a:b], [""] + seps[a + 1 : b], options)
        spans.append((clean[a].start, max(w.end for w in clean[a:b]), text))
    settled = _lengthen(_settle(spans), _ms(options.min_duration_s) or 0)
    if not options.highlight_words:
        return [Cue(a / 1000.0, b / 1000.0, text) for a, b, text in settled]
    return [cue for (a, b, text), (first, stop) in zip(settled, groups)
            for cue in _highlighted(a, b, text, clean[first:stop])]


def words_from_text(text: str, start: float, end: float) -> list[dict[str, Any]]:
    """``text`` cut into words as the word-timing pass cuts a transcript (whitespace runs; one
    word per space-less character), spread over ``[start, end]`` in proportion to their
    lengths: stand-in timings for a span that has no word timings."""
    cps = [ord(c) for c in text]
    if not cps:
        return []
    classes = _classes(cps)
    pieces: list[str] = []
    run: list[str] = []
    for ch, cls in zip(text, classes):
        if cls == 0:
            run.append(ch)
            continue
        if run:
            pieces.append("".join(run))
            run = []
        if cls == _SPACELESS:
            pieces.append(ch)
    if run:
        pieces.append("".join(run))
    total = sum(len(p) for p in pieces)
    span = max(end - start, 0.0)
    words, done = [], 0
    for p in pieces:
        a = start + span * done / total
        done += len(p)
        words.append({"word": p, "start": a, "end": start + span * done / total,
                      "confidence": None})
    return words


# ----------------------------------------------------------------------- formats


def _clock(seconds: float, decimal: str) -> str:
    ms = max(_ms(seconds) or 0, 0)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{ms:03d}"


def _lines(text: str) -> list[str]:
    # A blank line would end the cue early in both formats.
    return [line.strip() for line in text.splitlines() if line.strip()]


def _marked(cue: Cue, escape: Callable[[str], str] = str) -> list[str]:
    """The cue's lines, each part ``escape``d, its underlined word in ``<u>...</u>``."""
    if cue.underline is None:
        return _lines(escape(cue.text))
    a, b = cue.underline
    t = cue.text
    return _lines(escape(t[:a]) + "<u>" + escape(t[a:b]) + "</u>" + escape(t[b:]))


def to_srt(cues: Sequence[Cue]) -> str:
    """SubRip: numbered from 1, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line between cues;
    no cues gives an empty file. A cue without text is left out (SubRip has no empty cue)."""
    blocks = []
    for cue in cues:
        lines = _marked(cue)
        if lines:
            head = f"{len(blocks) + 1}\n{_clock(cue.start, ',')} --> {_clock(cue.end, ',')}"
            blocks.append(head + "\n" + "\n".join(lines) + "\n")
    return "\n".join(blocks)


def _vtt_escape(line: str) -> str:
    # The three characters WebVTT cue text reserves (tags and entities).
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_vtt(cues: Sequence[Cue]) -> str:
    """WebVTT: the ``WEBVTT`` header, then each cue as ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` and
    its text (``& < >`` escaped) after a blank line."""
    parts = ["WEBVTT\n"]
    for cue in cues:
        body = "\n".join(_marked(cue, _vtt_escape))
        if body:
            parts.append(f"\n{_clock(cue.start, '.')} --> {_clock(cue.end, '.')}\n{body}\n")
    return "".join(parts)


def render(cues: Sequence[Cue], fmt: str) -> str:
    """``to_srt`` or ``to_vtt`` by name."""
    if fmt == "srt":
        return to_srt(cues)
    if fmt == "vtt":
        return to_vtt(cues)
    raise ValueError(f"unknown subtitle format {fmt!r}; choose srt or vtt")
