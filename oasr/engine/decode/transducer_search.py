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

Hotwords (``contexts``: a ``hotwords.ContextGraph`` per row, or None): icefall's
``modified_beam_search`` with a context graph. A hypothesis carries its graph state; a label it
emits adds the graph's bonus to its log-probability (after the frame's top-k, so the bonus
ranks it from the next frame on); equal label sequences share one state, so merging them stays
a log-add-exp. The final ranking takes back a half-matched phrase's bonus
(``ContextGraph.finish``), as icefall finalizes. Without contexts the search is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from oasr.engine.decode.hotwords import ROOT, ContextGraph

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


def _merged_scores(vals: torch.Tensor, meta: torch.Tensor, width: int) -> torch.Tensor:
    """Each hypothesis' log-probability from the flat top-k values ``vals``: its first pick
    (``meta[:, 0]``), then each later pick of the same labels (``meta[:, 1:1 + width]``, -1
    where none) log-add-exp'd in pick order."""
    scores = vals[meta[:, 0]]
    for j in range(width):
        pick = meta[:, 1 + j]
        scores = torch.where(pick >= 0, torch.logaddexp(scores, vals[pick.clamp(min=0)]),
                             scores)
    return scores


@torch.inference_mode()
def modified_beam_search(predictor: Any, joiner: Any, hidden: torch.Tensor,
                         lengths: torch.Tensor, beam: int = 4, n_best: int = 1,
                         unk_id: int | None = None,
                         contexts: Sequence[ContextGraph | None] | None = None
                         ) -> list[list[TransducerHypothesis]]:
    """hidden (B, T, C_enc), lengths (B,) -> per row its ``n_best`` hypotheses, best first
    (ranked by log-probability / (labels + context_size), as icefall's final pick);
    ``contexts``: per row, the hotwords graph boosting it (see the module docstring).

    Batched over rows: each frame runs one predictor call over every hypothesis' label
    window, one joiner call over all (row, hypothesis) pairs and one top-k per row over its
    (hypotheses x vocab) scores, all on ``hidden``'s device; the host only keys the picks by
    their label sequences to merge equal ones (one upload and one download per frame).
    """
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
    device, batch = hidden.device, hidden.shape[0]
    enc = joiner.project_encoder(hidden)
    lens = [int(n) for n in lengths.tolist()]
    # Longest rows first, so the rows still decoding are always a prefix of the flat batch.
    order = sorted(range(batch), key=lambda b: -lens[b])
    start = tuple(predictor.init_state(1, device)[0].tolist())
    graphs = [None if contexts is None else contexts[b] for b in order]
    # Per held row: its hypotheses (labels incl. the start window, frames, probs, context
    # graph state) in pick order.
    beams: list[list[tuple[tuple[int, ...], list[int], list[float], int]]] = [
        [(start, [], [], ROOT)] for _ in order]
    first: list[int] = list(range(batch))  # per flat hypothesis: its pick in ``vals``
    later: list[list[int]] = [[] for _ in order]  # and its merged later picks
    vals = torch.zeros(batch, dtype=torch.float32, device=device)
    done: list[Any] = [None] * batch
    held, t = batch, 0
    while held:
        counts = [len(hyps) for hyps in beams]
        width = max(map(len, later))
        meta = torch.tensor(
            [[first[i], *later[i], *[-1] * (width - len(later[i])), order[r], r, slot, *ys[-ctx:]]
             for i, (r, slot, ys) in enumerate(
                 (r, slot, h[0]) for r, hyps in enumerate(beams) for slot, h in enumerate(hyps))],
            dtype=torch.int64, device=device)
        scores = _merged_scores(vals, meta, width)
        live = sum(1 for b in order[:held] if lens[b] > t)
        if live < held:  # rows whose frames are spent: final scores to the host
            n = sum(counts[:live])
            tail = scores[n:].tolist()
            for r in range(live, held):
                done[order[r]] = (beams[r], tail[:counts[r]])
                tail = tail[counts[r]:]
            held, beams, counts = live, beams[:live], counts[:live]
            graphs = graphs[:live]
            scores, meta = scores[:n], meta[:n]
            if not held:
                break
        rows, r_ids, slots = meta[:, 1 + width], meta[:, 2 + width], meta[:, 3 + width]
        dec = joiner.project_decoder(predictor.predict(meta[:, 4 + width:]))
        logits = joiner(enc[rows, t], dec).float()
        vocab, most = logits.shape[-1], max(counts)
        grid = logits.new_full((held, most, vocab), float("-inf"))
        grid[r_ids, slots] = logits.log_softmax(dim=-1) + scores.unsqueeze(1)
        prior = logits.new_zeros((held, most))
        prior[r_ids, slots] = scores
        k = min(beam, most * vocab)
        top_val, top_idx = grid.reshape(held, -1).topk(k, dim=1)
        post = (top_val - prior.gather(1, top_idx // vocab)).exp()
        picked = torch.cat([top_idx.double(), post.double()], dim=1).tolist()
        vals = top_val.reshape(-1)
        bonus: list[float] | None = None if contexts is None else [0.0] * vals.numel()
        first, later, merged = [], [], []
        for r, row in enumerate(picked):
            keys: dict[tuple[int, ...], int] = {}
            new: list[tuple[tuple[int, ...], list[int], list[float], int]] = []
            graph = graphs[r]
            for j in range(k):
                h, tok = divmod(int(row[j]), vocab)
                if h >= counts[r]:  # a -inf pad past this row's hypotheses
                    continue
                ys, frames, probs, state = beams[r][h]
                if tok not in (blank, unk):
                    ys, frames, probs = ys + (tok,), frames + [t], probs + [row[k + j]]
                    if graph is not None:
                        bonus[r * k + j], state = graph.step(state, tok)
                g = keys.get(ys)
                if g is None:
                    keys[ys] = len(new)
                    new.append((ys, frames, probs, state))
                    first.append(r * k + j)
                    later.append([])
                else:
                    later[len(first) - len(new) + g].append(r * k + j)
            merged.append(new)
        beams = merged
        if bonus is not None and any(bonus):
            vals = vals + torch.tensor(bonus, dtype=vals.dtype, device=device)
        t += 1
    out = []
    for b in range(batch):
        hyps, scores_b = done[b]
        graph = None if contexts is None else contexts[b]
        if graph is not None:  # a half-matched phrase earns nothing in the end
            scores_b = [s + graph.finish(h[3]) for h, s in zip(hyps, scores_b)]
        ranked = sorted(zip(hyps, scores_b), key=lambda hs: hs[1] / len(hs[0][0]), reverse=True)
        out.append([TransducerHypothesis(list(ys[ctx:]), list(frames), score, list(probs))
                    for (ys, frames, probs, _), score in ranked[:n_best]])
    return out
