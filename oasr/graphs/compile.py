"""TLG: the CTC topology T, the lexicon L and the grammar G composed into one decoding graph
(WeNet's and EESEN's recipe, built with kaldifst).

Label spaces. Units: model token id u is label u + 1 (0 is epsilon; Kaldi's CTC convention,
which kaldi-decoder's ``DecodableCtc`` reads), then the unit-side disambiguation symbols
``#0..#K``. Words: ``<eps>`` 0, the words 1..W in sorted order, then ``#0`` (the grammar's
backoff symbol), ``<s>``, ``</s>``.

- **G** (Kaldi's ``arpa2fst``): a state per history the model extends or gives a backoff weight
  (the start state is ``<s>``'s), an arc per n-gram to the state of its longest suffix that is a
  history, ``</s>`` as the final cost, a ``#0:<eps>`` backoff arc to the history less its first
  word; costs are ``-ln 10 * log10 p``.
- **L**: a loop state, a chain per spelling emitting the word on its first unit and closing with
  its disambiguation unit where it has one; a ``#0:#0`` self-loop carries G's backoff symbol.
- **LG** = minimize(determinize*(L o G)) with the disambiguation symbols in place (Kaldi's
  ``fsttablecompose | fstdeterminizestar --use-log=true | fstminimizeencoded``).
- **T** (WeNet's compact CTC topology): at the loop state the blank loops; unit u enters its own
  state (emitting u), loops there on u (a repeat) and returns by epsilon; the unit-side
  disambiguation symbols loop at the loop state with an epsilon input, so TLG = T o LG has none.

A repeat of a unit therefore takes one state's self-loop, and a new emission enters a state:
which is how the search reads tokens off a path (``token_rule="entered"``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from oasr.graphs.arpa import BOS, EOS, ArpaError, NgramModel
from oasr.graphs.lexicon import EPS, Lexicon, SymbolTable

__all__ = ["TlgParts", "build_tlg", "ctc_topology", "grammar_fst", "lexicon_fst",
           "word_table"]

LN10 = math.log(10.0)


def _kaldifst() -> Any:
    try:
        import kaldifst
    except ImportError as exc:
        raise ImportError("building graphs needs kaldifst (pip install kaldifst)") from exc
    return kaldifst


def word_table(words: Sequence[str]) -> SymbolTable:
    """``<eps>``, the words sorted, then ``#0``, ``<s>``, ``</s>``."""
    names = [EPS, *sorted(set(words)), "#0", BOS, EOS]
    return SymbolTable(dict(enumerate(names)))


def _compile(lines: list[str]) -> Any:
    kf = _kaldifst()
    fst = kf.compile("\n".join(lines) + "\n")
    return kf.StdVectorFst(fst)


def _cost(log10_prob: float) -> str:
    return f"{-log10_prob * LN10:.7g}"


def grammar_fst(model: NgramModel, words: SymbolTable) -> tuple[Any, int]:
    """G over ``words``; n-grams with a word outside the table are left out (their count is
    returned)."""
    order = model.order
    histories: set[tuple[str, ...]] = {()}
    for n in range(2, order + 1):
        histories.update(g[:-1] for g in model.grams[n - 1])
    for n in range(1, order):
        histories.update(g for g, (_, bow) in model.grams[n - 1].items() if bow != 0.0)
    histories = {h for h in histories if EOS not in h and BOS not in h[1:]}
    if (BOS,) not in histories:
        histories.add((BOS,))
    ids = {(BOS,): 0}
    for h in sorted(histories, key=lambda h: (len(h), h)):
        ids.setdefault(h, len(ids))

    def state_of(seq: tuple[str, ...]) -> int:
        seq = seq[len(seq) - (order - 1):] if order > 1 else ()
        while seq not in ids:
            seq = seq[1:]
        return ids[seq]

    backoff = words.ids["#0"]
    lines: list[str] = []
    finals: dict[int, str] = {}
    dropped = 0
    for n in range(1, order + 1):
        for gram, (prob, _) in model.grams[n - 1].items():
            hist, word = gram[:-1], gram[-1]
            if word == BOS:
                continue
            if BOS in gram[1:] or EOS in hist:
                raise ArpaError(f"n-gram {' '.join(gram)!r}: <s> may only start an n-gram and "
                                "</s> only end one")
            if hist not in ids:
                continue  # a history no n-gram reaches
            if word == EOS:
                finals[ids[hist]] = _cost(prob)
                continue
            label = words.ids.get(word)
            if label is None:
                dropped += 1
                continue
            lines.append(f"{ids[hist]} {state_of(hist + (word,))} {label} {label} {_cost(prob)}")
    for h, s in ids.items():
        if not h:
            continue
        entry = model.grams[len(h) - 1].get(h)
        bow = entry[1] if entry is not None else 0.0
        lines.append(f"{s} {state_of(h[1:])} {backoff} 0 {_cost(bow)}")
    if not any(line.startswith("0 ") for line in lines):
        raise ArpaError("the language model has no n-gram after <s>")
    # The text format's start state is the first line's source: the <s> state's arcs go first.
    lines.sort(key=lambda line: int(line.split(" ", 1)[0]))
    lines.extend(f"{s} {c}" for s, c in finals.items())
    return _compile(lines), dropped


def lexicon_fst(entries: list[tuple[str, tuple[int, ...], int]], words: SymbolTable,
                disambig_base: int) -> Any:
    """L: unit labels (id + 1; ``#k`` is ``disambig_base + k``) to word labels."""
    lines = []
    next_state = 1
    for word, units, k in entries:
        labels = [u + 1 for u in units] + ([disambig_base + k] if k else [])
        src = 0
        for i, lab in enumerate(labels):
            last = i == len(labels) - 1
            dst = 0 if last else next_state
            if not last:
                next_state += 1
            lines.append(f"{src} {dst} {lab} {words.ids[word] if i == 0 else 0}")
            src = dst
    lines.append(f"0 0 {disambig_base} {words.ids['#0']}")
    lines.append("0")
    return _compile(lines)


def ctc_topology(num_units: int, blank: int, disambig_labels: Sequence[int]) -> Any:
    """T over units 0..num_units-1 (labels id + 1), WeNet's compact topology."""
    lines = [f"0 0 {blank + 1} 0"]
    state = 1
    for u in range(num_units):
        if u == blank:
            continue
        lab = u + 1
        lines += [f"0 {state} {lab} {lab}", f"{state} {state} {lab} 0", f"{state} 0 0 0"]
        state += 1
    lines += [f"0 0 0 {d}" for d in disambig_labels]
    lines.append("0")
    return _compile(lines)


@dataclass
class TlgParts:
    """The composed graph and what the build left out."""

    fst: Any
    words: SymbolTable
    lexicon: Lexicon
    report: dict[str, Any] = field(default_factory=dict)


def build_tlg(num_units: int, blank: int, lexicon: Lexicon, lm: NgramModel) -> TlgParts:
    """T o min(det(L o G)) for a model of ``num_units`` units (blank at ``blank``)."""
    kf = _kaldifst()
    in_lm = set(lm.vocabulary)
    lexicon = lexicon.restrict(in_lm)
    if not lexicon.entries:
        raise ValueError("no word of the language model is in the lexicon")
    bad = sorted({u for _, units in lexicon.entries for u in units
                  if not 0 <= u < num_units or u == blank})
    if bad:
        raise ValueError(f"the lexicon spells words with units {bad[:5]} the model does not "
                         f"emit (it has {num_units} units, blank {blank})")
    words = word_table(lexicon.words)
    entries, top = lexicon.disambiguated()
    disambig_base = num_units + 1  # unit-side #0
    g, dropped = grammar_fst(lm, words)
    kf.arcsort(g, sort_type="ilabel")
    lx = lexicon_fst(entries, words, disambig_base)
    kf.arcsort(lx, sort_type="olabel")
    lg = kf.StdVectorFst(kf.compose(lx, g))
    kf.determinize_star(lg, use_log=True)
    kf.minimize_encoded(lg)
    kf.arcsort(lg, sort_type="ilabel")
    t = ctc_topology(num_units, blank, [disambig_base + k for k in range(top + 1)])
    kf.arcsort(t, sort_type="olabel")
    tlg = kf.StdVectorFst(kf.compose(t, lg))
    kf.arcsort(tlg, sort_type="ilabel")
    report = {"lm_words": len(in_lm), "lexicon_words": len(lexicon.words),
              "ngrams_left_out": dropped, "G_states": g.num_states, "LG_states": lg.num_states,
              "TLG_states": tlg.num_states}
    return TlgParts(tlg, words, lexicon, report)
