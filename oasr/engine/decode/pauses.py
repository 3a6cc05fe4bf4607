"""Pauses in a request's audio, in encoder frames, for snapping derived token spans.

Frame energy on 10 ms frames. A frame is quiet when it is digitally silent or below
``max(loud - below_db, floor + above_floor_db)``: ``loud`` and ``floor`` are the 95th and 5th
percentiles of the audible frames' energy within ``CONTEXT_S`` of the frame (computed per
``BLOCK_S`` block), so the level follows the speaker and the recording's noise where the frame
is: a recording whose noise floor sits 27 dB under its speech has pauses no frame 40 dB under the
speech would find, and one window can hold two recordings whose floors differ by 30 dB. The
context does not reach across digital silence (at least ``DIGITAL_GAP_S`` of it): the levels on
its two sides are two recordings' or two takes', not one. Sound shorter than ``min_sound_s``
(30 ms: a click) does not end a pause; 30-40 ms bursts a few dB over the floor just before the
speech do (the speech-edges reference counts 3 frames as speech, and the next window then
resumes there, not a little into the word). A pause is a quiet run of at least ``min_pause_s``;
one touching either end of the audio counts from ``min_edge_pause_s`` (a window that starts in
the tail of a pause begins with it).
Only the ``aed`` aligner uses it: frame-synchronous families record when a token was emitted and
need no correction.
"""

from __future__ import annotations

import numpy as np

LOUD_PERCENTILE = 95.0
FLOOR_PERCENTILE = 5.0
HOP_S = 0.01
BLOCK_S = 0.5
CONTEXT_S = 2.0
# Mean-square energy (dB) below which a frame is digital silence, not recorded noise.
DIGITAL_SILENCE_DB = -90.0
DIGITAL_GAP_S = 0.1
MIN_SOUND_S = 0.03
# A frame this far over the local noise floor is sound (the speech-edges reference's rule).
ABOVE_FLOOR_DB = 12.0


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def _percentile_sorted(rows: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    """Per row, numpy's linear percentile ``q`` of its first ``count`` entries (rows sorted,
    padding after them); NaN where ``count`` is 0."""
    k = np.maximum(count - 1, 0) * (q / 100.0)
    lo = np.floor(k).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
    r = np.arange(len(rows))
    a, b = rows[r, lo], rows[r, hi]
    return np.where(count > 0, a + (b - a) * (k - lo), np.nan)


def quiet_frames(audio: np.ndarray, sample_rate: int, below_db: float = 35.0,
                 above_floor_db: float | None = None,
                 min_sound_s: float = MIN_SOUND_S) -> np.ndarray:
    """(N,) bool per ``HOP_S`` frame of ``audio`` (N,) float32: no speech in that frame.
    ``above_floor_db``: None for ``ABOVE_FLOOR_DB``."""
    if above_floor_db is None:
        above_floor_db = ABOVE_FLOOR_DB
    hop = max(1, int(round(HOP_S * sample_rate)))
    n = len(audio) // hop
    if n == 0:
        return np.zeros(0, dtype=bool)
    frames = np.asarray(audio[:n * hop], dtype=np.float32).reshape(n, hop)
    power = np.einsum("ij,ij->i", frames, frames).astype(np.float64) / hop
    energy = 10.0 * np.log10(power + 1e-12)
    audible = energy > DIGITAL_SILENCE_DB
    block = max(1, int(round(BLOCK_S / HOP_S)))
    reach = int(round(CONTEXT_S / HOP_S))
    threshold = np.full(n, np.inf)  # a block with nothing audible around it is all pause
    gap_starts, gap_ends = _runs(~audible)
    long_gap = (gap_ends - gap_starts) * HOP_S >= DIGITAL_GAP_S - 1e-9
    bounds = np.concatenate(([0], np.stack([gap_starts[long_gap], gap_ends[long_gap]],
                                           axis=1).reshape(-1), [n]))
    for r0, r1 in zip(bounds[::2], bounds[1::2]):  # the audible regions between long gaps
        if r1 <= r0:
            continue
        starts = np.arange(r0, r1, block)
        # (blocks, context) frame indices; out of the region or inaudible -> NaN, sorted last.
        idx = starts[:, None] - reach + np.arange(block + 2 * reach)[None, :]
        ends = np.minimum(starts + block, r1)
        valid = (idx >= r0) & (idx < np.minimum(ends + reach, r1)[:, None])
        valid &= audible[np.clip(idx, 0, n - 1)]
        near = np.sort(np.where(valid, energy[np.clip(idx, 0, n - 1)], np.nan), axis=1)
        count = valid.sum(axis=1)
        loud = _percentile_sorted(near, count, LOUD_PERCENTILE)
        floor = _percentile_sorted(near, count, FLOOR_PERCENTILE)
        level = np.where(count > 0, np.maximum(loud - below_db, floor + above_floor_db), np.inf)
        for a, b, t in zip(starts, ends, level):
            threshold[a:b] = t
    quiet = ~audible | (energy < threshold)
    starts, ends = _runs(~quiet)
    short = (ends - starts) * HOP_S < min_sound_s - 1e-9
    for s, e in zip(starts[short], ends[short]):
        quiet[s:e] = True
    return quiet


def speech_pauses(audio: np.ndarray, sample_rate: int, seconds_per_frame: float,
                  below_db: float = 35.0, above_floor_db: float | None = None,
                  min_pause_s: float = 0.3, min_edge_pause_s: float = 0.1,
                  min_sound_s: float = MIN_SOUND_S) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the pauses in ``audio`` (N,) float32, in (fractional) frames of
    ``seconds_per_frame``, ordered and disjoint; float64 for the span arithmetic."""
    quiet = quiet_frames(audio, sample_rate, below_db, above_floor_db, min_sound_s)
    starts, ends = _runs(quiet)
    length = (ends - starts) * HOP_S
    edge = (starts == 0) | (ends == len(quiet))
    keep = (length >= min_pause_s - 1e-9) | (edge & (length >= min_edge_pause_s - 1e-9))
    scale = HOP_S / seconds_per_frame
    return starts[keep] * scale, ends[keep] * scale
