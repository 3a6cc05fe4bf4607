"""Pauses in a request's audio, in encoder frames, for snapping derived token spans.

Frame energy on 10 ms frames. A frame is quiet when it is digitally silent or below
``max(loud - below_db, floor + above_floor_db)``: ``loud`` and ``floor`` are the 95th and 5th
percentiles of the audible frames' energy within ``CONTEXT_S`` of the frame (computed per
``BLOCK_S`` block), so the level follows the speaker and the recording's noise where the frame
is: a recording whose noise floor sits 27 dB under its speech has pauses no frame 40 dB under the
speech would find, and one window can hold two recordings whose floors differ by 30 dB. The
context does not reach across digital silence (at least ``DIGITAL_GAP_S`` of it): the levels on
its two sides are two recordings' or two takes', not one. Sound shorter than ``min_sound_s``
(a click) does not end a pause. A pause is a quiet run of at least ``min_pause_s``; one touching
either end of the audio counts from ``min_edge_pause_s`` (a window that starts in the tail of a
pause begins with it).
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


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def quiet_frames(audio: np.ndarray, sample_rate: int, below_db: float = 35.0,
                 above_floor_db: float = 12.0, min_sound_s: float = 0.05) -> np.ndarray:
    """(N,) bool per ``HOP_S`` frame of ``audio`` (N,) float32: no speech in that frame."""
    hop = max(1, int(round(HOP_S * sample_rate)))
    n = len(audio) // hop
    if n == 0:
        return np.zeros(0, dtype=bool)
    frames = np.asarray(audio[:n * hop], dtype=np.float64).reshape(n, hop)
    energy = 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-12)
    audible = energy > DIGITAL_SILENCE_DB
    block = max(1, int(round(BLOCK_S / HOP_S)))
    reach = int(round(CONTEXT_S / HOP_S))
    threshold = np.full(n, np.inf)  # a block with nothing audible around it is all pause
    gap_starts, gap_ends = _runs(~audible)
    long_gap = (gap_ends - gap_starts) * HOP_S >= DIGITAL_GAP_S - 1e-9
    bounds = np.concatenate(([0], np.stack([gap_starts[long_gap], gap_ends[long_gap]],
                                           axis=1).reshape(-1), [n]))
    for r0, r1 in zip(bounds[::2], bounds[1::2]):  # the audible regions between long gaps
        for a in range(r0, r1, block):
            b = min(r1, a + block)
            lo, hi = max(r0, a - reach), min(r1, b + reach)
            near = energy[lo:hi][audible[lo:hi]]
            if near.size:
                loud, floor = np.percentile(near, [LOUD_PERCENTILE, FLOOR_PERCENTILE])
                threshold[a:b] = max(loud - below_db, floor + above_floor_db)
    quiet = ~audible | (energy < threshold)
    starts, ends = _runs(~quiet)
    short = (ends - starts) * HOP_S < min_sound_s - 1e-9
    for s, e in zip(starts[short], ends[short]):
        quiet[s:e] = True
    return quiet


def speech_pauses(audio: np.ndarray, sample_rate: int, seconds_per_frame: float,
                  below_db: float = 35.0, above_floor_db: float = 12.0,
                  min_pause_s: float = 0.3, min_edge_pause_s: float = 0.1
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the pauses in ``audio`` (N,) float32, in (fractional) frames of
    ``seconds_per_frame``, ordered and disjoint; float64 for the span arithmetic."""
    quiet = quiet_frames(audio, sample_rate, below_db, above_floor_db)
    starts, ends = _runs(quiet)
    length = (ends - starts) * HOP_S
    edge = (starts == 0) | (ends == len(quiet))
    keep = (length >= min_pause_s - 1e-9) | (edge & (length >= min_edge_pause_s - 1e-9))
    scale = HOP_S / seconds_per_frame
    return starts[keep] * scale, ends[keep] * scale
