"""N-gram language models in ARPA format: read, write, and estimate one from text.

``estimate`` is interpolated Kneser-Ney (Chen & Goodman 1998, section 3.5; the model SRILM's
``ngram-count -kndiscount -interpolate`` and KenLM's ``lmplz`` write, with one discount per order
instead of three):

- adjusted counts: at the highest order an n-gram's count; at a lower order the number of
  distinct words seen before it (its continuation count), except for n-grams starting with
  ``<s>``, which nothing precedes and which keep their counts;
- per order one absolute discount ``D = n1 / (n1 + 2 n2)`` from that order's counts of adjusted
  counts equal to 1 and 2 (Ney et al. 1994); 0.5 where the text has no n-gram seen twice, the
  estimate's limit for a corpus of singletons;
- ``p(w | h) = max(a(hw) - D, 0) / a(h.) + gamma(h) p(w | h')`` with ``a(h.)`` the adjusted
  counts of h's extensions summed, ``gamma(h) = D N1+(h.) / a(h.)`` and ``h'`` h less its first
  word; unigrams interpolate with the uniform distribution over the vocabulary (``<s>`` excluded,
  ``</s>`` included).

The ARPA file stores each seen n-gram's interpolated probability and, for each history,
``gamma(h)`` as its backoff weight, so reading it back gives the same distribution.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["NgramModel", "ArpaError", "read_arpa", "write_arpa", "estimate", "sentences_from"]

BOS, EOS = "<s>", "</s>"
NO_PROB = -99.0  # ARPA's log10 probability of <s>, which is never predicted


class ArpaError(ValueError):
    """An ARPA file that does not parse; the message names the file and line."""


@dataclass
class NgramModel:
    """``grams[n - 1]`` maps an n-gram (a tuple of words) to ``(log10 p, log10 backoff)``."""

    grams: list[dict[tuple[str, ...], tuple[float, float]]] = field(default_factory=list)

    @property
    def order(self) -> int:
        return len(self.grams)

    @property
    def vocabulary(self) -> list[str]:
        """The words the model predicts (every unigram but ``<s>`` and ``</s>``), sorted."""
        return sorted(w for (w,) in self.grams[0] if w not in (BOS, EOS)) if self.grams else []

    def log10_prob(self, history: Sequence[str], word: str) -> float:
        """``log10 p(word | history)`` under ARPA backoff semantics."""
        history = tuple(history)[-(self.order - 1):] if self.order > 1 else ()
        bow = 0.0
        while True:
            hit = self.grams[len(history)].get(history + (word,))
            if hit is not None:
                return hit[0] + bow
            if not history:
                return NO_PROB
            ctx = self.grams[len(history) - 1].get(history)
            bow += ctx[1] if ctx is not None else 0.0
            history = history[1:]


# -- reading and writing ---------------------------------------------------------------------

_COUNT = re.compile(r"^ngram\s+(\d+)\s*=\s*(\d+)\s*$")
_SECTION = re.compile(r"^\\(\d+)-grams:\s*$")


def read_arpa(path: str | Path) -> NgramModel:
    """Parse an ARPA file (``\\data\\`` counts, then each order's section, then ``\\end\\``)."""
    path = Path(path)
    counts: dict[int, int] = {}
    model = NgramModel()
    order = 0
    state = "head"
    lineno = 0

    def fail(what: str) -> ArpaError:
        return ArpaError(f"{path}:{lineno}: {what}; is this an ARPA language model?")

    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, 1):  # noqa: B007 (fail reads it)
            line = raw.strip()
            if not line:
                continue
            if state == "head":
                if line == "\\data\\":
                    state = "data"
                continue
            if state == "data":
                m = _COUNT.match(line)
                if m:
                    counts[int(m.group(1))] = int(m.group(2))
                    continue
                state = "body"
            if line == "\\end\\":
                state = "end"
                break
            m = _SECTION.match(line)
            if m:
                order = int(m.group(1))
                if order != len(model.grams) + 1:
                    raise fail(f"section \\{order}-grams: out of order")
                model.grams.append({})
                continue
            if order == 0:
                raise fail(f"unexpected line {line[:40]!r} before the first n-gram section")
            parts = line.split()
            if len(parts) not in (order + 1, order + 2):
                raise fail(f"a {order}-gram line needs a log10 probability, {order} words and "
                           "an optional backoff weight")
            try:
                prob = float(parts[0])
                bow = float(parts[order + 1]) if len(parts) == order + 2 else 0.0
            except ValueError as exc:
                raise fail(f"not a number in {line[:40]!r}") from exc
            model.grams[-1][tuple(parts[1:order + 1])] = (prob, bow)
    if state != "end":
        raise ArpaError(f"{path}: no \\end\\ marker (the file is cut short or not ARPA)")
    for n, c in counts.items():
        got = len(model.grams[n - 1]) if n <= len(model.grams) else 0
        if got != c:
            raise ArpaError(f"{path}: \\data\\ announces {c} {n}-grams, the file has {got}")
    if not model.grams:
        raise ArpaError(f"{path}: no n-grams")
    return model


def write_arpa(model: NgramModel, path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\\data\\\n")
        for n, grams in enumerate(model.grams, 1):
            fh.write(f"ngram {n}={len(grams)}\n")
        for n, grams in enumerate(model.grams, 1):
            fh.write(f"\n\\{n}-grams:\n")
            top = n == model.order
            for words in sorted(grams):
                prob, bow = grams[words]
                text = " ".join(words)
                if top or bow == 0.0:
                    fh.write(f"{prob:.7f}\t{text}\n")
                else:
                    fh.write(f"{prob:.7f}\t{text}\t{bow:.7f}\n")
        fh.write("\n\\end\\\n")


# -- estimation --------------------------------------------------------------------------------

def sentences_from(lines: Iterable[str]) -> list[list[str]]:
    """Whitespace-split non-empty lines."""
    return [line.split() for line in lines if line.split()]


def _discount(adjusted: dict[tuple[str, ...], int]) -> float:
    n1 = sum(1 for c in adjusted.values() if c == 1)
    n2 = sum(1 for c in adjusted.values() if c == 2)
    if n1 == 0 or n2 == 0:
        return 0.5
    return n1 / (n1 + 2 * n2)


def estimate(sentences: Iterable[Sequence[str]], order: int = 3) -> NgramModel:
    """An interpolated Kneser-Ney model of ``order`` from tokenized sentences."""
    if order < 1:
        raise ValueError(f"order must be >= 1, got {order}")
    raw: list[dict[tuple[str, ...], int]] = [defaultdict(int) for _ in range(order)]
    for sent in sentences:
        words = [BOS, *sent, EOS]
        for n in range(1, order + 1):
            for i in range(len(words) - n + 1):
                gram = tuple(words[i:i + n])
                if gram == (BOS,):
                    continue
                raw[n - 1][gram] += 1
    if not raw[0]:
        raise ValueError("no text to estimate a language model from")
    # Adjusted counts: raw at the top order and for n-grams at the sentence start.
    adjusted: list[dict[tuple[str, ...], int]] = [dict(raw[order - 1])]
    for n in range(order - 1, 0, -1):
        preceded: dict[tuple[str, ...], set[str]] = defaultdict(set)
        for gram in raw[n]:
            preceded[gram[1:]].add(gram[0])
        adj = {}
        for gram, c in raw[n - 1].items():
            adj[gram] = c if gram[0] == BOS else len(preceded.get(gram, ()))
        adjusted.insert(0, {g: c for g, c in adj.items() if c > 0})
    vocab = sorted({w for (w,) in adjusted[0]} | {EOS})
    probs: list[dict[tuple[str, ...], float]] = []
    gammas: list[dict[tuple[str, ...], float]] = []
    for n in range(1, order + 1):
        counts = adjusted[n - 1]
        d = _discount(counts)
        total: dict[tuple[str, ...], int] = defaultdict(int)
        kinds: dict[tuple[str, ...], int] = defaultdict(int)
        for gram, c in counts.items():
            total[gram[:-1]] += c
            kinds[gram[:-1]] += 1
        gamma = {h: d * kinds[h] / total[h] for h in total}
        level: dict[tuple[str, ...], float] = {}
        for gram, c in counts.items():
            h = gram[:-1]
            lower = (1.0 / len(vocab)) if n == 1 else _interpolated(probs, gammas, gram[1:])
            level[gram] = max(c - d, 0.0) / total[h] + gamma[h] * lower
        probs.append(level)
        gammas.append(gamma)
    model = NgramModel([{} for _ in range(order)])
    for n in range(1, order + 1):
        for gram, p in probs[n - 1].items():
            g = gammas[n].get(gram) if n < order else None
            model.grams[n - 1][gram] = (math.log10(p), math.log10(g) if g else 0.0)
    if order > 1:  # <s> is a history, never predicted
        g = gammas[1].get((BOS,))
        model.grams[0][(BOS,)] = (NO_PROB, math.log10(g) if g else 0.0)
    return model


def _interpolated(probs: list[dict[tuple[str, ...], float]],
                  gammas: list[dict[tuple[str, ...], float]], gram: tuple[str, ...]) -> float:
    """The interpolated probability of ``gram`` at its own order, backing off through the
    lower orders where it was not seen."""
    n = len(gram)
    p = probs[n - 1].get(gram)
    if p is not None:
        return p
    h = gram[:-1]
    g = gammas[n - 1].get(h, 1.0)
    return g * _interpolated(probs, gammas, gram[1:])
