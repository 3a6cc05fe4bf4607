"""The ``ctc_aed_rescoring`` family (U2 / U2++): CTC n-best, then one attention rescoring pass.

Per micro-batch: ``model.ctc_log_probs(hidden)`` and the CTC prefix beam search (``ctc.py``)
give each row ``beam_size`` hypotheses with their CTC prefix log-probabilities; one batched,
teacher-forced pass of the attention decoder over every hypothesis of every row
(``model.attention_scores``) scores them, and each row keeps the hypothesis maximising WeNet's
fusion

    score = attention_score + rescoring_ctc_weight * ctc_score

where ``attention_score`` is the model's (1 - reverse_weight) * left-to-right +
reverse_weight * right-to-left sum of token log-probs, end of sentence included. A tie goes to
the hypothesis the CTC beam ranked higher. Word timings and the confidence come from the
winning hypothesis' CTC emitting frames and posteriors, as in ``ctc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from oasr.engine.decode.ctc import CtcDecodeStrategy, validate_search
from oasr.engine.decode.options import option
from oasr.engine.request import Request, RequestOutput


@dataclass
class CtcAedRescoringOptions:
    beam_size: int = option(10, doc="CTC prefix beam width, and the number of hypotheses "
                                    "rescored per row.")
    rescoring_ctc_weight: float = option(0.5, doc="Fused score = attention score + this x the "
                                                  "CTC prefix log-probability.")
    rescoring_reverse_weight: float = option(0.0, doc="Right-to-left decoder's share of the "
                                                      "attention score (bitransformer "
                                                      "checkpoints); 0 scores left-to-right "
                                                      "only.")
    blank_skip_threshold: float = option(1.0, doc="The CTC beam skips frames whose blank "
                                                  "probability exceeds this; 1.0 never skips.")

    def validate(self) -> None:
        validate_search(self.beam_size, self.blank_skip_threshold)
        if not 0.0 <= self.rescoring_reverse_weight <= 1.0:
            raise ValueError("rescoring_reverse_weight must be in [0, 1], got "
                             f"{self.rescoring_reverse_weight}")


def fuse(attention: list[float], ctc: list[float], ctc_weight: float) -> list[int]:
    """Hypothesis indices by fused score, best first; ties keep the CTC order."""
    if len(attention) != len(ctc):
        raise ValueError(f"attention_scores returned {len(attention)} scores for {len(ctc)} "
                         "hypotheses")
    fused = [a + ctc_weight * c for a, c in zip(attention, ctc)]
    return sorted(range(len(fused)), key=lambda i: -fused[i])


class CtcAedRescoringStrategy(CtcDecodeStrategy):
    name = "ctc_aed_rescoring"
    consumes = "both"
    capability = "ctc_aed_rescoring"
    options_cls = CtcAedRescoringOptions
    streaming_session = None  # the rescoring pass reads a whole utterance's n-best: not chunk-wise
    selective_options: ClassVar[tuple[str, ...]] = ()  # no hotwords: rescoring would undo them

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or CtcAedRescoringOptions(), **kwargs)

    def decode_offline(self, hidden: torch.Tensor, hidden_lens: torch.Tensor | None,
                       requests: list[Request]) -> list[RequestOutput]:
        """hidden (B, T', C) and hidden_lens (B,) from ``encode_offline`` -> one output per
        request."""
        opt = self.options
        n, hyps = self.search(self.model.ctc_log_probs(hidden), hidden_lens, opt.beam_size)
        att = self.model.attention_scores(hidden, hidden_lens,
                                          [[h.tokens.tolist() for h in row] for row in hyps],
                                          opt.rescoring_reverse_weight)
        rankings = []
        for b, row in enumerate(hyps):
            order = fuse(list(att[b]), [h.score for h in row], opt.rescoring_ctc_weight)
            rankings.append([row[i] for i in order])
        return self.build_outputs(requests, rankings, n, [r.decoding.n_best or 1 for r in requests])
