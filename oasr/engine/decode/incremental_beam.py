"""Label-synchronous beam search with host-list hypotheses (``ArBeamGroup``).

An AR step is a whole decoder forward, so keeping hypotheses as host lists costs nothing next
to it. The decoder needs no beam method: ``select(state, idx)`` with repeated indices both
expands the prefilled rows into a grid of ``beam_size`` slots and reorders the grid onto each
slot's parent.

The search is openai-whisper's ``BeamSearchDecoder`` (faster-whisper's CTranslate2 search
shares its stopping rule): each step walks the candidates best first, banking those that end
with EOS until ``beam_size`` live ones are kept; the newly finished join a request's finished
candidates best first while fewer than ``round(beam_size * patience)`` (``patience``: the
request's, 1.0 by default; rounded half away from zero, as CTranslate2) and the request
retires once it has that many, or at its token cap; the finished set is then topped up with
the live hypotheses, best first, to ``beam_size``, and ranked by
``sum log p / length ** length_penalty`` (the request's ``length_penalty``, else the
family's; the sum counts the EOS, the length does not). A row's forced tokens start its
hypothesis (and count in both). Width 1 reproduces greedy token for token (the property the
tests pin). ``keep(state, slots)``, when given, is called with
the grid slots of the rows retiring in a step before the grid drops them, so a caller can keep
what it needs of them (the AED keeps their cross-attention K/V to time words); each finished
tuple then ends with its share of what ``keep`` returned.
"""

from __future__ import annotations

import math
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
    ended: bool = False  # finished with EOS (else cut at the token cap)


def candidate_limit(beam_size: int, patience: float | None) -> int:
    """Finished hypotheses a request collects before it retires."""
    return max(1, math.floor(beam_size * (1.0 if patience is None else patience) + 0.5))


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
        self.alive: list[list[Hyp]] = [
            [Hyp(list(r.forced), list(r.forced_logps), sum(r.forced_logps))] for r in rows]
        self.finished: list[list[Hyp]] = [[] for _ in rows]
        self.limits = [candidate_limit(beam_size, r.request.decoding.patience) for r in rows]
        self.penalties = [length_penalty if r.request.decoding.length_penalty is None
                          else r.request.decoding.length_penalty for r in rows]
        self.live = list(range(len(rows)))  # row indices still decoding, in grid order
        self.last = torch.zeros(0, dtype=torch.long, device=first_logits.device)
        self._pending = self._expand(first_logits)

    @property
    def empty(self) -> bool:
        return not self.live and not self._pending

    @property
    def active_rows(self) -> int:
        return len(self.live)

    def grid(self) -> list[tuple[ArRow, list[int]]]:
        """Each live grid slot's row and tokens, in the order the next logits come."""
        return [(self.rows[r], h.tokens) for r in self.live for h in self.alive[r]]

    def _rank(self, h: Hyp, penalty: float) -> float:
        n = max(len(h.tokens), 1)
        return h.score / (n ** penalty)

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
            fresh: list[Hyp] = []  # finished this step, best first (the walk's order)
            for score, flat, tok_lp in zip(top_scores[j], top_idx[j], top_lp[j], strict=True):
                parent, token = divmod(flat, vocab)
                base = self.alive[r][parent]
                if token == self.eos_id:
                    fresh.append(Hyp(base.tokens, base.logps + [tok_lp], score, ended=True))
                else:
                    row_alive.append(Hyp(base.tokens + [token], base.logps + [tok_lp], score))
                    row_parents.append(j * slots + parent)
                if len(row_alive) >= self.k:
                    break
            finished = self.finished[r]
            for h in fresh:
                if len(finished) >= self.limits[r]:
                    break
                finished.append(h)
            row = self.rows[r]
            at_cap = bool(row_alive) and len(row_alive[0].tokens) >= row.max_new
            if len(finished) >= self.limits[r] or not row_alive or at_cap:
                for h in row_alive:  # top up with the live ones (already best first)
                    if len(finished) >= self.k:
                        break
                    finished.append(h)
                penalty = self.penalties[r]
                ranked = sorted(finished, key=lambda h: self._rank(h, penalty), reverse=True)
                best = ranked[0]
                reason = "stop" if best.ended else "length"
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
