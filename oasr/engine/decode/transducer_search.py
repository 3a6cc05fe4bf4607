"""Transducer searches over encoder hidden states: greedy and modified beam search.

Semantics are icefall's (``greedy_search`` / ``modified_beam_search``): greedy emits up to
``max_sym_per_frame`` labels per frame (blank and ``unk_id`` advance the frame); modified
beam search emits at most one label per frame, merges hypotheses with the same labels by
log-add-exp and ranks the final ones by score / (labels + context_size). Beam 1 is greedy
with ``max_sym_per_frame = 1``, token for token. Each label records the encoder frame that
emitted it (``frames``), which is what word timings are aligned from.

``predictor`` is a ``TransducerPredictor`` whose state is a label window (B, context) and
``joiner`` an additive joiner with ``project_encoder`` / ``project_decoder``
(``oasr.models.transducer.stateless``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["TransducerHypothesis", "greedy_search", "modified_beam_search"]


@dataclass
class TransducerHypothesis:
    """tokens: emitted labels; frames: the encoder frame of each; probs: each label's
    posterior at its emission (the joiner's softmax); score: its log-probability (beam) or the
    sum of its emitted logits (greedy)."""

    tokens: list[int]
    frames: list[int] = field(default_factory=list)
    score: float = 0.0
    probs: list[float] = field(default_factory=list)


def _check(hidden: torch.Tensor, lengths: torch.Tensor) -> None:
    if hidden.ndim != 3:
        raise ValueError(f"hidden must be (B, T, C), got {tuple(hidden.shape)}")
    if lengths.shape != (hidden.shape[0],):
        raise ValueError(f"lengths must be ({hidden.shape[0]},), got {tuple(lengths.shape)}")


@torch.inference_mode()
def greedy_search(predictor: Any, joiner: Any, hidden: torch.Tensor, lengths: torch.Tensor,
                  max_sym_per_frame: int = 1, unk_id: int | None = None
                  ) -> list[TransducerHypothesis]:
    """hidden (B, T, C_enc), lengths (B,) -> one hypothesis per row, batched over rows."""
    _check(hidden, lengths)
    if max_sym_per_frame < 1:
        raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym_per_frame}")
    batch, device = hidden.shape[0], hidden.device
    state = predictor.init_state(batch, device)
    dec = joiner.project_decoder(predictor.predict(state))
    hyps = [TransducerHypothesis([]) for _ in range(batch)]
    greedy_frames(predictor, joiner, hidden, lengths, state, dec, hyps, 0, max_sym_per_frame,
                  unk_id)
    return hyps


def greedy_frames(predictor: Any, joiner: Any, hidden: torch.Tensor, lengths: torch.Tensor,
                  state: Any, dec: torch.Tensor, hyps: list[TransducerHypothesis],
                  frame0: int, max_sym_per_frame: int, unk_id: int | None = None
                  ) -> tuple[Any, torch.Tensor]:
    """Greedy over ``hidden`` (B, T, C_enc) from the predictor ``state`` and its projected
    output ``dec``, appending to ``hyps`` (frames counted from ``frame0``) -> the state and
    ``dec`` after the last frame, so a stream continues where a chunk ended."""
    blank = predictor.blank_id
    unk = blank if unk_id is None else unk_id
    enc = joiner.project_encoder(hidden)
    lengths = lengths.to(hidden.device)
    for t in range(int(lengths.max().item()) if hidden.shape[0] else 0):
        live = lengths > t
        for _ in range(max_sym_per_frame):
            logits = joiner(enc[:, t], dec)
            best = logits.argmax(dim=-1)
            emitted = live & (best != blank) & (best != unk)
            if not bool(emitted.any()):
                break
            rows = emitted.nonzero().flatten()
            posts = logits[rows].float().softmax(dim=-1).gather(1, best[rows].unsqueeze(1))
            for i, post in zip(rows.tolist(), posts.flatten().tolist()):
                tok = int(best[i])
                hyps[i].tokens.append(tok)
                hyps[i].frames.append(frame0 + t)
                hyps[i].probs.append(post)
                hyps[i].score += float(logits[i, tok])
            state = predictor.advance(state, best, emitted)
            dec = torch.where(emitted.unsqueeze(1), joiner.project_decoder(
                predictor.predict(state)), dec)
            live = emitted
    return state, dec


def _add(beam: dict[tuple[int, ...], list[Any]], ys: tuple[int, ...], logp: torch.Tensor,
         frames: list[int], probs: list[float]) -> None:
    if ys in beam:
        beam[ys][0] = torch.logaddexp(beam[ys][0], logp)
    else:
        beam[ys] = [logp, frames, probs]


@torch.inference_mode()
def modified_beam_search(predictor: Any, joiner: Any, hidden: torch.Tensor,
                         lengths: torch.Tensor, beam: int = 4, n_best: int = 1,
                         unk_id: int | None = None) -> list[list[TransducerHypothesis]]:
    """hidden (B, T, C_enc), lengths (B,) -> per row its ``n_best`` hypotheses, best first
    (ranked by log-probability / (labels + context_size), as icefall's final pick)."""
    _check(hidden, lengths)
    if beam < 1 or n_best < 1:
        raise ValueError(f"beam and n_best must be >= 1, got {beam}, {n_best}")
    ctx = predictor.label_window
    if ctx is None:
        raise ValueError(f"{type(predictor).__name__} is not a label-window predictor; "
                         "modified beam search builds states from label windows: decode with "
                         "beam_size=1 (greedy)")
    blank = predictor.blank_id
    unk = blank if unk_id is None else unk_id
    device = hidden.device
    enc = joiner.project_encoder(hidden)
    out = []
    for b in range(hidden.shape[0]):
        start = tuple(predictor.init_state(1, device)[0].tolist())
        hyps: dict[tuple[int, ...], list[Any]] = {
            start: [torch.zeros(1, dtype=torch.float32, device=device), [], []]}
        for t in range(int(lengths[b])):
            items = list(hyps.items())
            window = torch.tensor([ys[-ctx:] for ys, _ in items], dtype=torch.int64,
                                  device=device)
            dec = joiner.project_decoder(predictor.predict(window))
            logits = joiner(enc[b, t].expand(len(items), -1), dec)
            prior = torch.cat([v[0].reshape(1, 1) for _, v in items])
            logp = (logits.float().log_softmax(dim=-1) + prior).reshape(-1)
            vocab = logits.shape[-1]
            top_val, top_idx = logp.topk(min(beam, logp.numel()))
            hyps = {}
            for val, idx in zip(top_val, top_idx.tolist()):
                ys, (_, frames, probs) = items[idx // vocab]
                tok = idx % vocab
                if tok not in (blank, unk):
                    post = float((val - prior[idx // vocab, 0]).exp())
                    _add(hyps, ys + (tok,), val.reshape(1), frames + [t], probs + [post])
                else:
                    _add(hyps, ys, val.reshape(1), list(frames), list(probs))
        ranked = sorted(hyps.items(), key=lambda kv: float(kv[1][0]) / len(kv[0]),
                        reverse=True)
        out.append([TransducerHypothesis(list(ys[ctx:]), frames, float(v), probs)
                    for ys, (v, frames, probs) in ranked[:n_best]])
    return out
