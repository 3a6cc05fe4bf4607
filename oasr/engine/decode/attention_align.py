"""Token spans for attention encoder-decoders: cross-attention DTW over the alignment heads.

A label-synchronous decoder has no frame index, so this is the one family where the spans are
derived: one teacher-forced decoder pass per finished row that asked (batched over the rows
finishing together), reusing the row's cached cross-attention K/V. The scores of the
checkpoint's ``alignment_heads`` become a (tokens x frames) matrix: softmax over the audio's
frames, standardised per frame over the tokens, median-filtered along time, averaged over heads.
The monotone DTW path through its negation (``oasr._C.alignment.dtw``) assigns each token the
frame where the path first reaches it; a token ends where the next one starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oasr.native import native

MEDIAN_FILTER_WIDTH = 7


@dataclass
class TokenSpans:
    """Per text token: start and end, in encoder frames."""

    starts: np.ndarray
    ends: np.ndarray


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median over a sliding ``width`` window along the last axis, reflect-padded."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    lead = x.shape[:-1]
    flat = x.reshape(1, -1, x.shape[-1])
    flat = torch.nn.functional.pad(flat, (pad, pad), mode="reflect")
    windows = flat.unfold(-1, width, 1)
    return windows.sort(dim=-1).values[..., pad].reshape(*lead, x.shape[-1])


def alignment_matrix(scores: torch.Tensor, num_frames: int,
                     width: int = MEDIAN_FILTER_WIDTH) -> torch.Tensor:
    """scores (heads, S, T_enc) pre-softmax -> (S, num_frames) alignment strength."""
    w = scores[:, :, :num_frames].float().softmax(dim=-1)
    std, mean = torch.std_mean(w, dim=-2, keepdim=True, unbiased=False)
    w = (w - mean) / std
    return median_filter(w, width).mean(dim=0)


def align_rows(decoder, prompts: list[list[int]], texts: list[list[int]], num_frames: list[int],
               cross_k: list[torch.Tensor], cross_v: list[torch.Tensor],
               heads: list[tuple[int, int]], eot: int) -> list[TokenSpans]:
    """Spans of each row's ``texts`` tokens, decoded after ``prompts`` (which end with the
    no-timestamps token), against the rows' cross K/V (per layer (R, H, T_enc, D))."""
    seqs = [p + t + [eot] for p, t in zip(prompts, texts)]
    width = max(len(s) for s in seqs)
    host_tokens = torch.full((len(seqs), width), eot, dtype=torch.long)
    for i, s in enumerate(seqs):
        host_tokens[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    scores = decoder.cross_attention_scores(host_tokens.to(cross_k[0].device), cross_k, cross_v,
                                            heads)
    # Every row's matrix is built on the device, then read back in one copy (no sync per row).
    shapes: list[tuple[int, int]] = []
    matrices: list[torch.Tensor] = []
    for i, (p, t) in enumerate(zip(prompts, texts)):
        first = len(p) - 1  # the no-timestamps position predicts the first text token
        frames = max(1, min(int(num_frames[i]), scores.shape[-1]))
        matrix = alignment_matrix(scores[i, :, :len(seqs[i])], frames)[first:first + len(t) + 1]
        shapes.append((matrix.shape[0], frames))
        matrices.append(matrix)
    stacked = scores.new_zeros(len(matrices), max(r for r, _ in shapes),
                               max(f for _, f in shapes))
    for i, m in enumerate(matrices):
        stacked[i, :m.shape[0], :m.shape[1]] = m
    host = (-stacked).cpu().numpy()
    dtw = native("alignment").dtw
    out = []
    for i, t in enumerate(texts):
        n = len(t)
        if n == 0:
            empty = np.zeros(0)
            out.append(TokenSpans(empty, empty))
            continue
        rows, frames = shapes[i]
        token_idx, frame_idx = dtw(np.ascontiguousarray(host[i, :rows, :frames],
                                                        dtype=np.float32))
        jumps = np.diff(token_idx, prepend=-1).astype(bool)
        starts_at = frame_idx[jumps].astype(np.float64)  # n + 1 entries, one per matrix row
        out.append(TokenSpans(starts_at[:n], starts_at[1:n + 1]))
    return out
