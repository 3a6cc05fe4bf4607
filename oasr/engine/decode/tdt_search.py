"""Token-and-duration transducer greedy search (NeMo's ``GreedyBatchedTDTInfer``, transformers'
``ParakeetForTDT.generate``), batched over rows.

Each step reads the joint at the row's current frame: the token is the argmax of the first
``vocab`` logits, the duration ``durations[argmax of the rest]``. A non-blank token is emitted
at the current frame and advances the predictor; the frame then moves on by the duration. A
blank never stays put (duration 0 becomes 1), and after ``max_symbols_per_step`` labels at one
frame a zero duration is forced to 1, which bounds the loop. Rows advance in lockstep; a row
whose frame has passed its length is frozen while the others finish.

Each label records its frame and duration, which is what word timings read. The loop keeps
everything on the device and looks at the host only every ``sync_every`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["TdtHypothesis", "tdt_greedy"]


@dataclass
class TdtHypothesis:
    """tokens; frames: each token's emitting frame; durations: its predicted duration;
    probs: its token posterior (softmax over the token logits)."""

    tokens: list[int]
    frames: list[int] = field(default_factory=list)
    durations: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)


@torch.inference_mode()
def tdt_greedy(predictor: Any, joiner: Any, hidden: torch.Tensor, lengths: torch.Tensor,
               blank_id: int, vocab_size: int, durations: list[int],
               max_symbols_per_step: int, sync_every: int = 4) -> list[TdtHypothesis]:
    """hidden (B, T, C), lengths (B,) -> one hypothesis per row."""
    if hidden.ndim != 3 or lengths.shape != (hidden.shape[0],):
        raise ValueError(f"hidden must be (B, T, C) and lengths (B,), got "
                         f"{tuple(hidden.shape)} and {tuple(lengths.shape)}")
    if max_symbols_per_step < 1:
        raise ValueError(f"max_symbols_per_step must be >= 1, got {max_symbols_per_step}")
    batch, frames_max, device = hidden.shape[0], hidden.shape[1], hidden.device
    if batch == 0:
        return []
    enc = joiner.project_encoder(hidden)
    state = predictor.init_state(batch, device)
    dec = joiner.project_decoder(predictor.predict(state))
    lengths = lengths.to(device=device, dtype=torch.int64)
    table = torch.tensor(durations, dtype=torch.int64, device=device)
    rows = torch.arange(batch, device=device)
    frame = torch.zeros(batch, dtype=torch.int64, device=device)
    symbols = torch.zeros_like(frame)
    active = frame < lengths
    steps: list[tuple[torch.Tensor, ...]] = []
    step = 0
    while True:
        if step % sync_every == 0 and not bool(active.any()):
            break
        step += 1
        logits = joiner(enc[rows, frame.clamp(max=frames_max - 1)], dec)
        token_logits = logits[:, :vocab_size].float()
        tok = token_logits.argmax(dim=-1)
        dur = table[logits[:, vocab_size:].argmax(dim=-1)]
        blank = tok == blank_id
        dur = torch.where(blank & (dur == 0), torch.ones_like(dur), dur)
        emit = active & ~blank
        symbols = torch.where(emit, symbols + 1, symbols)
        dur = torch.where(emit & (dur == 0) & (symbols >= max_symbols_per_step),
                          torch.ones_like(dur), dur)
        prob = token_logits.softmax(dim=-1).gather(1, tok[:, None])[:, 0]
        steps.append((emit, tok, frame, dur, prob))
        state = predictor.advance(state, tok, emit)
        dec = torch.where(emit[:, None], joiner.project_decoder(predictor.predict(state)), dec)
        frame = torch.where(active, frame + dur, frame)
        symbols = torch.where(dur > 0, torch.zeros_like(symbols), symbols)
        active = frame < lengths
    return _collect(steps, batch)


def _collect(steps: list[tuple[torch.Tensor, ...]], batch: int) -> list[TdtHypothesis]:
    hyps = [TdtHypothesis([]) for _ in range(batch)]
    if not steps:
        return hyps
    emit, tok, frame, dur, prob = (torch.stack(x, dim=1).cpu() for x in zip(*steps))
    for b in range(batch):
        sel = emit[b].nonzero().flatten()
        hyps[b] = TdtHypothesis(tok[b, sel].tolist(), frame[b, sel].tolist(),
                                dur[b, sel].tolist(), prob[b, sel].tolist())
    return hyps
