"""``best_of``: a sampled request decoded as several candidates, the best one kept.

faster-whisper's rule (CTranslate2's sampling with ``num_hypotheses``): at temperature > 0 a
request is sampled ``best_of`` times and the candidate with the highest
``sum log p / length ** length_penalty`` wins; the sum counts the end of text, the length is
the transcript's tokens without it. Ties go to the earlier candidate.

Each candidate is a row of its own (a copy of the request; candidate 0 keeps the request's
seed, candidate ``c`` draws from ``candidate_seed(seed, c)``, so a seeded request still draws
the same tokens whatever it is batched with). Candidates take decoder KV like any row: the
ones the KV budget has no room for when the request is admitted wait (``waiting``), holding
one copy of the request's encoder output, and start as finished rows free their blocks; the
admission budget counts them as held, so no later request takes their room.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from oasr.engine.request import Request, RequestOutput

__all__ = ["CandidateSet", "candidate_seed"]

_SEED_STRIDE = 0x9E3779B97F4A7C15  # spreads candidate seeds over the 63-bit range


def candidate_seed(seed: int | None, index: int) -> int | None:
    """The sampling seed of candidate ``index`` (``None``: unseeded draws)."""
    if seed is None or index == 0:
        return seed
    return (seed + index * _SEED_STRIDE) % (1 << 63)


@dataclass
class CandidateSet:
    """The candidates of one request. ``enc`` (1, T, C) / ``enc_lens`` (1,): its encoder
    output, kept while candidates wait."""

    request: Request
    n: int
    length_penalty: float
    enc: torch.Tensor | None = None
    enc_lens: torch.Tensor | None = None
    waiting: list[int] = field(default_factory=list)  # candidate indices not yet prefilled
    language: str | None = None  # the first prefill's language, fixed for later candidates
    results: list[tuple[float, int, RequestOutput, Any]] = field(default_factory=list)

    def copy(self, index: int) -> Request:
        d = self.request.decoding
        decoding = replace(d, best_of=1, seed=candidate_seed(d.seed, index),
                           language=d.language if d.language is not None else self.language)
        return Request(self.request.request_id, self.request.audio, decoding,
                       self.request.metadata)

    def score(self, logp_sum: float, length: int) -> float:
        return logp_sum / max(length, 1) ** self.length_penalty

    def add(self, score: float, index: int, out: RequestOutput, row: Any
            ) -> tuple[RequestOutput, Any] | None:
        """Record a finished candidate; once all ``n`` are in, the winner (its output and
        row), else ``None``."""
        self.results.append((score, index, out, row))
        if len(self.results) < self.n:
            return None
        best = max(self.results, key=lambda r: (r[0], -r[1]))
        out = best[2]
        if out.language_probability is None:  # a candidate that started late was not detected
            for _, _, other, _ in self.results:
                if other.language_probability is not None:
                    out.language_probability = other.language_probability
                    out.all_language_probs = other.all_language_probs
                    break
        return out, best[3]
