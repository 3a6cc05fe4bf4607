"""Reading transformers' transducer ``generate`` output as per-row hypotheses."""

from __future__ import annotations

import torch


def hf_hypotheses(out, enc_lens: torch.Tensor, blank: int) -> list[tuple[list[int], list[int]]]:
    """(tokens, frames) per row from ``ParakeetRNNTGenerateOutput``.

    transformers keeps stepping every row until all rows are done and does not pad the finished
    ones, so a row's steps are cut where its frame passes its length: step ``s`` (column
    ``s + 1``) reads frame ``sum(durations[1 : s + 1])``.
    """
    seqs, durs = out.sequences.tolist(), out.durations.tolist()
    rows = []
    for b, n in enumerate(enc_lens.tolist()):
        frame, toks, frames = 0, [], []
        for tok, dur in zip(seqs[b][1:], durs[b][1:]):
            if frame >= n:
                break
            if tok != blank:
                toks.append(tok)
                frames.append(frame)
            frame += dur
        rows.append((toks, frames))
    return rows
