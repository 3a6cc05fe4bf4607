"""Corpus word and character error rates over id-keyed transcripts.

``score`` joins references and hypotheses on id, normalizes both sides with a named text
normalizer and lets jiwer do the alignment (``process_words`` / ``process_characters`` over the
lists of normalized strings). Rates are corpus rates: total errors over total reference units,
not a mean of per-utterance rates.

Conventions, chosen so the numbers never depend on the jiwer version:

- Every normalizer's output is reduced to single-space-separated words (``" ".join(s.split())``).
  Words are whitespace tokens; characters are the characters of that canonical string, spaces
  between words included.
- A reference id with no hypothesis is scored against an empty hypothesis: all its words are
  deletions. Its id is listed in ``WerResult.missing_ids``.
- A hypothesis id with no reference is ignored and listed in ``WerResult.extra_ids``.
- A reference that normalizes to empty never reaches jiwer (older jiwer releases refuse empty
  references). Every word of its hypothesis is an insertion and every character an insertion
  for CER; it adds nothing to ``ref_words``.
- A corpus whose references hold no word at all has no defined rate: ``score`` raises
  ``EmptyReferenceError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from oasr.registry import Registry

__all__ = [
    "NORMALIZERS",
    "EmptyReferenceError",
    "Normalizer",
    "UtteranceScore",
    "WerResult",
    "get_normalizer",
    "normalizer_names",
    "score",
    "word_errors",
]

Normalizer = Callable[[str], str]


class EmptyReferenceError(ValueError):
    """The references hold no word to divide by, so no error rate exists."""


# ---------------------------------------------------------------------------------------------
# normalizers


def _whisper_english() -> Normalizer:
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


def _basic() -> Normalizer:
    from whisper_normalizer.basic import BasicTextNormalizer

    return BasicTextNormalizer()


def _identity() -> Normalizer:
    return _keep


def _keep(text: str) -> str:
    return text


# Factories, so the whisper normalizer's spelling table loads only when asked for.
NORMALIZERS: Registry[Callable[[], Normalizer]] = Registry("text normalizer")
NORMALIZERS.register("whisper", _whisper_english)
NORMALIZERS.register("basic", _basic)
NORMALIZERS.register("none", _identity)

_instances: dict[str, Normalizer] = {}


def normalizer_names() -> list[str]:
    return NORMALIZERS.names()


def get_normalizer(name: str) -> Normalizer:
    """The text normalizer registered as ``name``, followed by whitespace canonicalization.

    ``whisper``: Whisper's English normalizer (spellings, numbers, contractions, fillers).
    ``basic``: Whisper's language-agnostic normalizer (lower case, strip symbols and brackets).
    ``none``: the text as given; only whitespace is canonicalized.

    Raises ``oasr.registry.UnknownNameError`` listing the valid names for an unknown one.
    """
    inner = _instances.get(name)
    if inner is None:
        inner = NORMALIZERS.get(name)()
        _instances[name] = inner

    def normalize(text: str) -> str:
        return " ".join(inner(text).split())

    normalize.__name__ = f"normalize_{name}"
    return normalize


# ---------------------------------------------------------------------------------------------
# results


class UtteranceScore(NamedTuple):
    """One utterance's share of the corpus score; ``ref`` and ``hyp`` are normalized text."""

    id: str
    ref: str
    hyp: str
    errors: int
    ref_words: int

    @property
    def wer(self) -> float:
        """errors / ref_words; an empty reference counts as one word so the rate stays finite."""
        return self.errors / max(self.ref_words, 1)


@dataclass
class WerResult:
    """Corpus scores. Rates are fractions (0.153, not 15.3)."""

    wer: float
    cer: float
    substitutions: int
    deletions: int
    insertions: int
    hits: int
    ref_words: int
    ref_chars: int
    char_substitutions: int
    char_deletions: int
    char_insertions: int
    char_hits: int
    utterances: int
    normalizer: str
    per_utterance: list[UtteranceScore] = field(default_factory=list)
    missing_ids: list[str] = field(default_factory=list)
    extra_ids: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    def rate(self, metric: str) -> float:
        """The rate named ``"wer"`` or ``"cer"``."""
        if metric == "wer":
            return self.wer
        if metric == "cer":
            return self.cer
        raise ValueError(f"unknown metric {metric!r}; valid: cer, wer")

    def worst(self, n: int) -> list[UtteranceScore]:
        """The ``n`` utterances with the highest WER (ties: more errors first, then by id)."""
        if n <= 0:
            return []
        ranked = sorted(self.per_utterance, key=lambda u: (-u.wer, -u.errors, u.id))
        return [u for u in ranked[:n] if u.errors > 0]

    def to_dict(self, worst: int = 0) -> dict[str, Any]:
        """A JSON-ready summary; ``worst`` adds that many worst utterances."""
        out: dict[str, Any] = {
            "wer": self.wer,
            "cer": self.cer,
            "substitutions": self.substitutions,
            "deletions": self.deletions,
            "insertions": self.insertions,
            "hits": self.hits,
            "ref_words": self.ref_words,
            "char_substitutions": self.char_substitutions,
            "char_deletions": self.char_deletions,
            "char_insertions": self.char_insertions,
            "char_hits": self.char_hits,
            "ref_chars": self.ref_chars,
            "utterances": self.utterances,
            "normalizer": self.normalizer,
            "missing_ids": list(self.missing_ids),
            "extra_ids": list(self.extra_ids),
        }
        if worst > 0:
            out["worst"] = [
                {"id": u.id, "wer": u.wer, "errors": u.errors, "ref_words": u.ref_words,
                 "ref": u.ref, "hyp": u.hyp}
                for u in self.worst(worst)
            ]
        return out


# ---------------------------------------------------------------------------------------------
# scoring


class _Counts(NamedTuple):
    hits: int
    substitutions: int
    deletions: int
    insertions: int
    per_sentence_errors: list[int]


def _count(alignments: Iterable[Sequence[Any]], output: Any) -> _Counts:
    per_sentence = []
    for chunks in alignments:
        errors = 0
        for c in chunks:
            if c.type in ("substitute", "delete"):
                errors += c.ref_end_idx - c.ref_start_idx
            elif c.type == "insert":
                errors += c.hyp_end_idx - c.hyp_start_idx
        per_sentence.append(errors)
    return _Counts(output.hits, output.substitutions, output.deletions, output.insertions,
                   per_sentence)


def word_errors(ref: str, hyp: str, normalizer: str = "whisper") -> tuple[int, int]:
    """One utterance's (word errors, reference words), counted as :func:`score` counts them
    (an empty reference: every hypothesis word an insertion), without the character alignment
    ``score`` also computes: what a running figure needs, row by row."""
    import jiwer

    norm = get_normalizer(normalizer)
    ref_text, hyp_text = norm(ref), norm(hyp)
    if not ref_text:
        return len(hyp_text.split()), 0
    out = jiwer.process_words(ref_text, hyp_text)
    return out.substitutions + out.deletions + out.insertions, (
        out.hits + out.substitutions + out.deletions)


def score(
    refs: Mapping[str, str],
    hyps: Mapping[str, str],
    normalizer: str = "whisper",
) -> WerResult:
    """Score ``hyps`` against ``refs``, both mapping utterance id to text.

    Utterances are reported in ``refs`` order. See the module docstring for missing ids, extra
    ids and empty references.

    Raises:
        EmptyReferenceError: ``refs`` is empty, or no reference holds a word once normalized.
        oasr.registry.UnknownNameError: ``normalizer`` is not registered.
    """
    import jiwer

    if not refs:
        raise EmptyReferenceError("there are no references to score against")
    norm = get_normalizer(normalizer)
    ids = list(refs)
    missing = [i for i in ids if i not in hyps]
    extra = [i for i in hyps if i not in refs]
    ref_text = [norm(refs[i]) for i in ids]
    hyp_text = [norm(hyps.get(i, "")) for i in ids]

    # jiwer sees only utterances whose reference has a word; the rest are scored here.
    scored = [k for k, r in enumerate(ref_text) if r]
    if not scored:
        raise EmptyReferenceError(
            f"all {len(ids)} references are empty after the {normalizer!r} normalizer; "
            "there is no word to compute an error rate over"
        )
    sub_refs = [ref_text[k] for k in scored]
    sub_hyps = [hyp_text[k] for k in scored]
    words_out = jiwer.process_words(sub_refs, sub_hyps)
    chars_out = jiwer.process_characters(sub_refs, sub_hyps)
    words = _count(words_out.alignments, words_out)
    chars = _count(chars_out.alignments, chars_out)

    errors_by_k = dict(zip(scored, words.per_sentence_errors, strict=True))
    per_utt: list[UtteranceScore] = []
    empty_ref_word_ins = 0
    empty_ref_char_ins = 0
    for k, uid in enumerate(ids):
        n_ref = len(ref_text[k].split())
        if k in errors_by_k:
            errors = errors_by_k[k]
        else:
            errors = len(hyp_text[k].split())
            empty_ref_word_ins += errors
            empty_ref_char_ins += len(hyp_text[k])
        per_utt.append(UtteranceScore(uid, ref_text[k], hyp_text[k], errors, n_ref))

    insertions = words.insertions + empty_ref_word_ins
    char_insertions = chars.insertions + empty_ref_char_ins
    ref_words = words.hits + words.substitutions + words.deletions
    ref_chars = chars.hits + chars.substitutions + chars.deletions
    return WerResult(
        wer=(words.substitutions + words.deletions + insertions) / ref_words,
        cer=(chars.substitutions + chars.deletions + char_insertions) / ref_chars,
        substitutions=words.substitutions,
        deletions=words.deletions,
        insertions=insertions,
        hits=words.hits,
        ref_words=ref_words,
        ref_chars=ref_chars,
        char_substitutions=chars.substitutions,
        char_deletions=chars.deletions,
        char_insertions=char_insertions,
        char_hits=chars.hits,
        utterances=len(ids),
        normalizer=normalizer,
        per_utterance=per_utt,
        missing_ids=missing,
        extra_ids=extra,
    )
