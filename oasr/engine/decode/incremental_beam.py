"""Label-synchronous beam search with host-list hypotheses (``ArBeamGroup``).

An AR step is a whole decoder forward, so keeping hypotheses as host lists costs nothing next
to it. The decoder needs no beam method: ``select(state, idx)`` with repeated indices both
expands the prefilled rows into a grid of ``beam_size`` slots and reorders the grid onto each
slot's parent. A slot that emits EOS is banked as a finished candidate; a request retires when
it has ``beam_size`` finished candidates or reaches its token cap. Width 1 reproduces greedy
token for token (the property the tests pin). ``keep(state, slots)``, when given, is called with
the grid slots of the rows retiring in a step before the grid drops them, so a caller can keep
what it needs of them (the AED keeps their cross-attention K/V to time words); each finished
tuple then ends with its share of what ``keep`` returned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from oasr.engine.decode.incremental import ArRow


@dataclass
class Hyp:
    tokens: list[int]
    logps: list[float]
    score: float


class ArBeamGroup:
    """Beams of a prefilled micro-batch. ``step(logits)`` returns the rows that finished."""

    def __init__(self, rows: list[ArRow], state: Any, decoder: Any, first_logits: torch.Tensor,
                 beam_size: int, eos_id: int, length_penalty: float = 1.0,
                 keep: Callable[[Any, torch.Tensor], list[Any]] | None = None) -> None:
        self.rows = rows
        self.keep = keep
        self.decoder = decoder
        self.k = beam_size
        self.eos_id = eos_id
        self.length_penalty = length_penalty
        self.state = state
        self.alive: list[list[Hyp]] = [[Hyp([], [], 0.0)] for _ in rows]
        self.finished: list[list[Hyp]] = [[] for _ in rows]
        self.live = list(range(len(rows)))  # row indices still decoding, in grid order
        self.last = torch.zeros(0, dtype=torch.long, device=first_logits.device)
        self._pending = self._expand(first_logits)

    @property
    def empty(self) -> bool:
        return not self.live and not self._pending

    @property
    def active_rows(self) -> int:
        return len(self.live)

    def _rank(self, h: Hyp) -> float:
        n = max(len(h.tokens), 1)
        return h.score / (n ** self.length_penalty)

    def _expand(self, logits: torch.Tensor) -> list[tuple]:
        """Extend every live row's slots by one token; returns the rows that finished."""
        slots = len(self.alive[self.live[0]])
        vocab = logits.shape[-1]
        lp = torch.log_softmax(logits.float(), dim=-1)
        scores = torch.tensor([h.score for r in self.live for h in self.alive[r]],
                              device=lp.device, dtype=lp.dtype)
        cand = (lp + scores[:, None]).view(len(self.live), slots * vocab)
        top_scores, top_idx = cand.topk(min(2 * self.k, slots * vocab), dim=-1)
        top_lp = lp.view(len(self.live), slots * vocab).gather(1, top_idx)
        top_scores, top_idx, top_lp = top_scores.tolist(), top_idx.tolist(), top_lp.tolist()

        done: list[tuple] = []
        done_slots: list[int] = []  # a grid slot of each retiring row (all share its encoder)
        parents: list[int] = []
        tokens: list[int] = []
        still: list[int] = []
        for j, r in enumerate(self.live):
            row_alive: list[Hyp] = []
            row_parents: list[int] = []
            for score, flat, tok_lp in zip(top_scores[j], top_idx[j], top_lp[j], strict=True):
                parent, token = divmod(flat, vocab)
                base = self.alive[r][parent]
                if token == self.eos_id:
                    self.finished[r].append(Hyp(base.tokens, base.logps + [tok_lp], score))
                else:
                    row_alive.append(Hyp(base.tokens + [token], base.logps + [tok_lp], score))
                    row_parents.append(j * slots + parent)
                if len(row_alive) >= self.k:
                    break
            row = self.rows[r]
            at_cap = bool(row_alive) and len(row_alive[0].tokens) >= row.max_new
            if len(self.finished[r]) >= self.k or not row_alive or at_cap:
                reason = "stop"
                if at_cap and len(self.finished[r]) < self.k:
                    self.finished[r].extend(row_alive)
                    if not any(h.tokens and len(h.tokens) < row.max_new
                               for h in self.finished[r]):
                        reason = "length"
                ranked = sorted(self.finished[r], key=self._rank, reverse=True)
                best = ranked[0]
                if len(best.tokens) >= row.max_new and best in row_alive:
                    reason = "length"
                done.append((row, best.tokens, best.logps[:len(best.tokens)], reason,
                             [h.tokens for h in ranked]))
                done_slots.append(j * slots)
                continue
            self.alive[r] = row_alive
            still.append(r)
            parents += row_parents
            tokens += [h.tokens[-1] for h in row_alive]
        if done and self.keep is not None:
            kept = self.keep(self.state, torch.tensor(done_slots, device=lp.device))
            done = [(*d, k) for d, k in zip(done, kept, strict=True)]
        self.live = still
        if still:
            idx = torch.tensor(parents, device=lp.device)
            self.state = self.decoder.select(self.state, idx)
            self.last = torch.tensor(tokens, device=lp.device)
        return done

    def step(self, logits: torch.Tensor | None = None) -> list[tuple]:
        """Consume one decoder step's logits (already processed) for the live grid."""
        done, self._pending = self._pending, []
        if logits is not None and self.live:
            done += self._expand(logits)
        return done
