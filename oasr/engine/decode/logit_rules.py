"""Per-request logit rules of the AR families, applied to a batch whose rows may differ.

A row's rules (``RowRules``) come from its request: the tokens suppressed every step
(``suppress_tokens``), those suppressed on the first generated token (``suppress_blank``),
transformers' repetition penalty and n-gram blocking. ``BatchRules`` holds a batch's rules as
device tensors, built once per batch composition (a decode group's rows change only at merges
and compaction, which read the device anyway), so a step adds no host-to-device copy:

- suppression: one ``index_fill`` when every row suppresses the same ids, else a (N, V) mask;
- ``repetition_penalty`` (transformers' ``RepetitionPenaltyLogitsProcessor``): a token already
  in the row's history has its logit divided by the penalty when positive, multiplied when
  negative;
- ``no_repeat_ngram_size`` n (transformers' ``NoRepeatNGramLogitsProcessor``): a token that
  would complete an n-gram already in the history is banned.

The history is the row's transcript so far (forced prefix and generated tokens: what a greedy
group keeps in ``out``), the scope CTranslate2 (faster-whisper) gives both rules; transformers
also counts the prompt, whose special tokens are suppressed anyway. The rules run on the raw
logits, before timestamp rules and sampling filters, in transformers' order (penalty, n-grams,
suppression).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

NEG_INF = float("-inf")


@dataclass(frozen=True)
class RowRules:
    suppress: tuple[int, ...]  # sorted ids banned every step
    begin_suppress: tuple[int, ...]  # sorted ids banned on the first generated token
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0

    @property
    def reads_history(self) -> bool:
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0


def penalize_repeats(logits: torch.Tensor, history: torch.Tensor, lengths: torch.Tensor,
                     penalty: torch.Tensor | float) -> torch.Tensor:
    """logits (N, V) float, history (N, L) ids whose first ``lengths`` (N,) are valid, penalty
    (N,) or one for every row (1.0: off) -> logits with every seen token penalized."""
    n, vocab = logits.shape
    pos = torch.arange(history.shape[1], device=history.device)
    ids = torch.where(pos[None] < lengths[:, None], history, vocab)  # vocab: a discard column
    seen = torch.zeros(n, vocab + 1, dtype=torch.bool, device=logits.device)
    seen.scatter_(1, ids, True)
    p = penalty[:, None].to(logits.dtype) if isinstance(penalty, torch.Tensor) else penalty
    penalized = torch.where(logits < 0, logits * p, logits / p)
    return torch.where(seen[:, :vocab], penalized, logits)


def repeated_ngram_bans(history: torch.Tensor, lengths: torch.Tensor, size: int,
                        vocab: int) -> torch.Tensor:
    """(N, V) bool: the tokens that would complete an n-gram of ``size`` already in each row's
    history (N, L) (valid through ``lengths`` (N,)); transformers' ``_get_ngrams`` rule."""
    n, width = history.shape
    bans = torch.zeros(n, vocab + 1, dtype=torch.bool, device=history.device)
    if width < size:
        return bans[:, :vocab]
    windows = history.unfold(1, size, 1)  # (N, W, size): every n-gram start
    starts = torch.arange(windows.shape[1], device=history.device)
    complete = starts[None] + size <= lengths[:, None]
    head = size - 1
    if head:
        at = (lengths[:, None] - head + torch.arange(head, device=history.device)).clamp(min=0)
        tail = history.gather(1, at)  # (N, size - 1): the last size - 1 tokens
        match = (windows[..., :head] == tail[:, None]).all(-1) & (lengths[:, None] >= head)
    else:
        match = torch.ones_like(complete)
    banned = torch.where(match & complete, windows[..., head], vocab)
    bans.scatter_(1, banned, True)
    return bans[:, :vocab]


class BatchRules:
    """The rules of a batch's rows (one ``RowRules`` per logits row) as device tensors. When
    every row shares one ``RowRules`` (``uniform``) nothing depends on the row count, so one
    instance serves any batch of such rows."""

    def __init__(self, rows: Sequence[RowRules], vocab: int, device: torch.device) -> None:
        self.vocab = vocab
        self.device = device
        self.uniform = len(set(rows)) == 1
        self.suppress_ids, self.suppress_mask = _suppression([r.suppress for r in rows],
                                                             vocab, device)
        self.begin_ids, self.begin_mask = _suppression([r.begin_suppress for r in rows],
                                                       vocab, device)
        penalties = [r.repetition_penalty for r in rows]
        self.penalty: torch.Tensor | float | None = None
        if self.uniform:
            self.penalty = penalties[0] if penalties[0] != 1.0 else None
        elif any(p != 1.0 for p in penalties):
            self.penalty = torch.tensor(penalties, dtype=torch.float32, device=device)
        # Per n-gram size, the rows using it (None: all; usually one size for the batch).
        self.ngrams: list[tuple[int, torch.Tensor | None]] = []
        sizes = [r.no_repeat_ngram_size for r in rows]
        for size in sorted({s for s in sizes if s > 0}):
            idx = [i for i, s in enumerate(sizes) if s == size]
            self.ngrams.append((size, None if len(idx) == len(rows)
                                else torch.tensor(idx, device=device)))

    @property
    def reads_history(self) -> bool:
        return self.penalty is not None or bool(self.ngrams)

    def apply(self, logits: torch.Tensor, first: bool, history: torch.Tensor | None = None,
              lengths: torch.Tensor | None = None) -> torch.Tensor:
        """logits (N, V) float -> ruled logits. ``history`` (N, L) and ``lengths`` (N,): each
        row's transcript so far (needed when a row penalizes repeats or blocks n-grams)."""
        if self.reads_history:
            if history is None or lengths is None:
                raise ValueError("repetition_penalty / no_repeat_ngram_size read each row's "
                                 "history; none was given")
            if self.penalty is not None:
                logits = penalize_repeats(logits, history, lengths, self.penalty)
            for size, rows in self.ngrams:
                if rows is None:
                    bans = repeated_ngram_bans(history, lengths, size, self.vocab)
                    logits = logits.masked_fill(bans, NEG_INF)
                else:
                    bans = repeated_ngram_bans(history.index_select(0, rows),
                                               lengths.index_select(0, rows), size, self.vocab)
                    sub = logits.index_select(0, rows).masked_fill(bans, NEG_INF)
                    logits = logits.index_copy(0, rows, sub)
        logits = _suppress(logits, self.suppress_ids, self.suppress_mask)
        if first:
            logits = _suppress(logits, self.begin_ids, self.begin_mask)
        return logits


def _suppression(sets: list[tuple[int, ...]], vocab: int, device: torch.device
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(ids, None) when every row bans the same ids, else (None, an (N, V) mask)."""
    if len(set(sets)) <= 1:
        ids = sets[0] if sets else ()
        return (torch.tensor(ids, dtype=torch.long, device=device) if ids else None), None
    mask = torch.zeros(len(sets), vocab, dtype=torch.bool)
    for i, ids in enumerate(sets):
        if ids:
            mask[i, list(ids)] = True
    return None, mask.to(device)


def _suppress(logits: torch.Tensor, ids: torch.Tensor | None, mask: torch.Tensor | None
              ) -> torch.Tensor:
    if ids is not None:
        return logits.index_fill(1, ids, NEG_INF)
    if mask is not None:
        return logits.masked_fill(mask, NEG_INF)
    return logits
