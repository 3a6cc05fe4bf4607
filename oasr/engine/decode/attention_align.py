"""Token spans for attention encoder-decoders: cross-attention DTW over the alignment heads.

A label-synchronous decoder has no frame index, so this is the one family where the spans are
derived, for a whole batch of finished rows at once: one teacher-forced decoder pass over them
(token sequences right-padded; causal attention never reads the pad), reusing the rows' cached
cross-attention K/V. The scores of the checkpoint's ``alignment_heads`` become one
(tokens x frames) matrix per row: softmax over the row's frames, standardised per frame over
its tokens, median-filtered along time, averaged over heads: on CUDA as one padded batch with
the rows' own lengths, on the CPU row by row at each row's size. One batched DTW
(``oasr.engine.decode.dtw``: a single kernel launch on CUDA) through the negated matrices gives
each token the frame where its row's path first reaches it; a token ends where the next one
starts.

``alignment_matrix`` and ``align_rows_per_row`` state the same computation one row at a time
(openai-whisper's order of operations): the oracle the batched path is tested against, and the
baseline ``benchmarks/gpu_align.py`` measures it against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from oasr.engine.decode.dtw import dtw_starts
from oasr.native import native

MEDIAN_FILTER_WIDTH = 7
# Elements of the median filter's windowed copy built at once: the rows are filtered in chunks
# under this bound (4 bytes each), so a batch of long rows does not allocate gigabytes.
MEDIAN_CHUNK_ELEMENTS = 1 << 27


@dataclass
class TokenSpans:
    """Per text token: start and end, in encoder frames."""

    starts: np.ndarray
    ends: np.ndarray


# -- one row at a time: the statement ------------------------------------------------------

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


def _padded_tokens(prompts: list[list[int]], texts: list[list[int]], eot: int,
                   device: torch.device) -> tuple[torch.Tensor, list[int]]:
    seqs = [p + t + [eot] for p, t in zip(prompts, texts)]
    width = max(len(s) for s in seqs)
    host = torch.full((len(seqs), width), eot, dtype=torch.long)
    for i, s in enumerate(seqs):
        host[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    return host.to(device), [len(s) for s in seqs]


def _spans(starts: np.ndarray, n: int) -> TokenSpans:
    """Row starts (n + 1 entries: the text tokens and the end of text) -> the tokens' spans."""
    if n == 0:
        empty = np.zeros(0)
        return TokenSpans(empty, empty)
    at = starts[:n + 1].astype(np.float64)
    return TokenSpans(at[:n], at[1:n + 1])


def align_rows_per_row(decoder, prompts: list[list[int]], texts: list[list[int]],
                       num_frames: list[int], cross_k: list[torch.Tensor],
                       cross_v: list[torch.Tensor], heads: list[tuple[int, int]],
                       eot: int) -> list[TokenSpans]:
    """``align_rows`` one row at a time after the shared pass: each row's matrix built alone on
    the device, all of them read back in one copy, each row's DTW its own host call
    (``oasr._C.alignment.dtw``)."""
    tokens, lens = _padded_tokens(prompts, texts, eot, cross_k[0].device)
    scores = decoder.cross_attention_scores(tokens, cross_k, cross_v, heads)
    return spans_per_row(scores, lens, prompts, texts, num_frames)


def row_matrices(scores: torch.Tensor, seq_lens: list[int], firsts: list[int],
                 counts: list[int], frames: list[int]) -> torch.Tensor:
    """``alignment_matrices``' result built one row at a time, each at its own size, into the
    same zero-padded (R, max counts, max frames) block."""
    block = scores.new_zeros(len(counts), max(counts), max(frames), dtype=torch.float32)
    for i in range(len(counts)):
        m = alignment_matrix(scores[i, :, :seq_lens[i]], frames[i])[firsts[i]:firsts[i]
                                                                    + counts[i]]
        block[i, :m.shape[0], :m.shape[1]] = m
    return block


def _geometry(scores: torch.Tensor, prompts: list[list[int]], texts: list[list[int]],
              num_frames: list[int]) -> tuple[list[int], list[int], list[int]]:
    """Per row: its frames (clamped to the window), first matrix row, matrix row count."""
    frames = [max(1, min(int(n), scores.shape[-1])) for n in num_frames]
    firsts = [len(p) - 1 for p in prompts]  # the no-timestamps position predicts the first text
    counts = [len(t) + 1 for t in texts]
    return frames, firsts, counts


def spans_per_row(scores: torch.Tensor, seq_lens: list[int], prompts: list[list[int]],
                  texts: list[list[int]], num_frames: list[int]) -> list[TokenSpans]:
    """The rows' spans from the pass's scores (R, heads, S, T_enc), one row at a time."""
    frames, firsts, counts = _geometry(scores, prompts, texts, num_frames)
    host = (-row_matrices(scores, seq_lens, firsts, counts, frames)).cpu().numpy()
    dtw = native("alignment").dtw
    out = []
    for i, t in enumerate(texts):
        if not t:
            out.append(_spans(np.zeros(0), 0))
            continue
        token_idx, frame_idx = dtw(np.ascontiguousarray(host[i, :counts[i], :frames[i]],
                                                        dtype=np.float32))
        jumps = np.diff(token_idx, prepend=-1).astype(bool)
        out.append(_spans(frame_idx[jumps], len(t)))
    return out


# -- the batch ------------------------------------------------------------------------------

def _median_filter_rows(w: torch.Tensor, frames: torch.Tensor, width: int) -> torch.Tensor:
    """``median_filter`` of every row of w (R, H, N, F) over its own first ``frames[r]``
    frames (reflect-padded at that length; a row of at most width // 2 frames is left as is).
    Frames past a row's length come out unspecified."""
    R, H, N, F = w.shape
    pad = width // 2
    if R == 0 or F <= pad:
        return w
    # Each row's reflect padding as one gather index over the padded frame axis.
    q = torch.arange(-pad, F + pad, device=w.device)[None, :]
    f = frames[:, None]
    src = torch.where(q < 0, -q, torch.where(q >= f, 2 * (f - 1) - q, q))
    src = torch.where(f > pad, src, q).clamp(0, F - 1)  # too short to filter: untouched below
    out = torch.empty_like(w)
    per_row = H * N * F * width
    step = max(1, MEDIAN_CHUNK_ELEMENTS // max(per_row, 1))
    for lo in range(0, R, step):
        hi = min(R, lo + step)
        idx = src[lo:hi, None, None, :].expand(hi - lo, H, N, F + 2 * pad)
        padded = w[lo:hi].gather(-1, idx)
        out[lo:hi] = padded.unfold(-1, width, 1).median(dim=-1).values
    short = frames <= pad
    if bool(short.any()):
        out[short] = w[short]
    return out


def alignment_matrices(scores: torch.Tensor, seq_lens: list[int], firsts: list[int],
                       counts: list[int], frames: list[int],
                       width: int = MEDIAN_FILTER_WIDTH) -> torch.Tensor:
    """``alignment_matrix`` for every row at once.

    scores (R, heads, S, T_enc) pre-softmax, row r's sequence its first ``seq_lens[r]``
    positions and its audio its first ``frames[r]`` frames; returns (R, max counts, max frames)
    fp32 where row r's matrix (its ``counts[r]`` token rows from position ``firsts[r]``) fills
    the top-left corner and the rest is 0.
    """
    R, _, S, _ = scores.shape
    dev = scores.device
    F = max(frames)
    N = max(counts)
    f = torch.tensor(frames, device=dev)
    s_len = torch.tensor(seq_lens, device=dev)
    frame_ok = torch.arange(F, device=dev)[None, :] < f[:, None]  # (R, F)
    token_ok = torch.arange(S, device=dev)[None, :] < s_len[:, None]  # (R, S)
    w = scores[..., :F].float().masked_fill(~frame_ok[:, None, None, :], float("-inf"))
    w = w.softmax(dim=-1)
    # Standardised per frame over each row's own tokens (the pad positions excluded).
    keep = token_ok[:, None, :, None]
    count = s_len.to(torch.float32)[:, None, None, None]
    mean = torch.where(keep, w, 0.0).sum(dim=-2, keepdim=True) / count
    var = torch.where(keep, (w - mean) ** 2, 0.0).sum(dim=-2, keepdim=True) / count
    w = (w - mean) / var.sqrt()
    # Only the rows DTW reads: counts[r] from firsts[r] (the filter is per token row).
    pick = (torch.tensor(firsts, device=dev)[:, None]
            + torch.arange(N, device=dev)[None, :]).clamp(max=S - 1)
    w = w.gather(2, pick[:, None, :, None].expand(R, w.shape[1], N, F))
    m = _median_filter_rows(w, f, width).mean(dim=1)  # (R, N, F)
    row_ok = torch.arange(N, device=dev)[None, :] < torch.tensor(counts, device=dev)[:, None]
    return torch.where(row_ok[:, :, None] & frame_ok[:, None, :], m, 0.0)


def align_rows(decoder, prompts: list[list[int]], texts: list[list[int]], num_frames: list[int],
               cross_k: list[torch.Tensor], cross_v: list[torch.Tensor],
               heads: list[tuple[int, int]], eot: int) -> list[TokenSpans]:
    """Spans of each row's ``texts`` tokens, decoded after ``prompts`` (which end with the
    no-timestamps token), against the rows' cross K/V (per layer (R, H, T_enc, D)): one
    teacher-forced pass, one batched matrix build and one batched DTW for all the rows."""
    tokens, lens = _padded_tokens(prompts, texts, eot, cross_k[0].device)
    scores = decoder.cross_attention_scores(tokens, cross_k, cross_v, heads)
    return spans_batched(scores, lens, prompts, texts, num_frames)


def spans_batched(scores: torch.Tensor, seq_lens: list[int], prompts: list[list[int]],
                  texts: list[list[int]], num_frames: list[int]) -> list[TokenSpans]:
    """The rows' spans from the pass's scores (R, heads, S, T_enc): the matrices built for the
    batch, one DTW for the batch.

    On CUDA the matrices are one padded batch (a fixed handful of launches, where row by row
    cost about 15 per row); on the CPU, where a launch costs nothing, each row's is built at its
    own size (``row_matrices``): the padded build did several times the arithmetic there
    (about 1.0 s against 0.17 s for 16 ragged LibriSpeech rows, docs/decoding.md)."""
    frames, firsts, counts = _geometry(scores, prompts, texts, num_frames)
    build = alignment_matrices if scores.is_cuda else row_matrices
    matrices = build(scores, seq_lens, firsts, counts, frames)
    starts = dtw_starts(-matrices, counts, frames)
    return [_spans(starts[i], len(t)) for i, t in enumerate(texts)]
