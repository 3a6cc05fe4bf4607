"""Cut a recording into overlapping model windows while it is decoded, in bounded memory.

Audio arrives as consecutive chunks (``oasr.audio.iter_audio_chunks``); windows of
``window_s`` start every ``window_s - overlap_s`` seconds, and the last one is shifted left so
it ends at the recording's end (it stays full-length, as ``oasr.engine.longform.plan_windows``
plans them). At most about one window plus one chunk of samples is held at a time, so a
1-hour file costs the same memory as a 1-minute one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from oasr.engine.longform import Window


def stream_windows(chunks: Iterable[np.ndarray], sample_rate: int, window_s: float = 30.0,
                   overlap_s: float = 5.0) -> Iterator[tuple[Window, np.ndarray]]:
    """Yield ``(window, samples)`` over the concatenation of ``chunks``.

    A recording no longer than ``window_s`` is one window holding all of it.
    """
    if not 0 <= overlap_s < window_s:
        raise ValueError(f"need 0 <= overlap_s < window_s, got {overlap_s} and {window_s}")
    w = int(round(window_s * sample_rate))
    stride = w - int(round(overlap_s * sample_rate))
    buf = np.zeros(0, dtype=np.float32)
    buf_start = 0  # sample index of buf[0] on the recording clock
    next_start = 0
    index = 0
    last_end = 0
    for chunk in chunks:
        buf = np.concatenate([buf, np.asarray(chunk, dtype=np.float32)])
        # A window is emitted only once audio continues past it, so a recording that ends
        # exactly at a window boundary is not followed by a redundant shifted window.
        while buf_start + len(buf) > next_start + w:
            off = next_start - buf_start
            yield (Window(index, next_start / sample_rate, (next_start + w) / sample_rate),
                   buf[off:off + w].copy())
            index += 1
            last_end = next_start + w
            next_start += stride
        total = buf_start + len(buf)
        # Keep what the next window needs, and the last full window for the shifted tail.
        keep_from = min(next_start, max(total - w, 0))
        if keep_from > buf_start:
            buf = buf[keep_from - buf_start:]
            buf_start = keep_from
    total = buf_start + len(buf)
    if index == 0:
        if total:
            yield Window(0, 0.0, total / sample_rate), buf.copy()
        return
    if total > last_end:
        start = total - w
        off = start - buf_start
        yield Window(index, start / sample_rate, total / sample_rate), buf[off:off + w].copy()
