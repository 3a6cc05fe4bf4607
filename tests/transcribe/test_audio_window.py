"""ForwardAudio: forward-only windows over a recording decoded in chunks."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.transcribe.audio_window import ForwardAudio


def _chunks(audio: np.ndarray, sizes: list[int]):
    at = 0
    for n in sizes:
        yield audio[at:at + n]
        at += n
    if at < len(audio):
        yield audio[at:]


@pytest.mark.parametrize("sizes", [[1000], [7, 300, 1, 50], [200] * 5, [999, 1]])
def test_windows_and_peeks_are_the_recordings_samples(sizes):
    audio = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    reader = ForwardAudio(_chunks(audio, sizes))
    taken = []
    for start, length in [(0, 120), (100, 40), (100, 400), (350, 700), (990, 50)]:
        ahead = reader.peek(start + 30, 80)
        np.testing.assert_array_equal(ahead, audio[start + 30:start + 110])
        window = reader.window(start, length)
        np.testing.assert_array_equal(window, audio[start:start + length])
        taken.append((start, length, window, ahead))
    # Windows and peeks outlive the reader moving on, unchanged.
    for start, length, window, ahead in taken:
        np.testing.assert_array_equal(window, audio[start:start + length])
        np.testing.assert_array_equal(ahead, audio[start + 30:start + 110])
    assert reader.total == 1000
    assert reader.has_more(999) and not reader.has_more(1000)


def test_windows_are_read_only_and_move_forward_only():
    reader = ForwardAudio(iter([np.ones(100, np.float32), np.ones(100, np.float32)]))
    window = reader.window(50, 100)
    with pytest.raises(ValueError, match="read-only"):
        window[0] = 0.0
    with pytest.raises(ValueError, match="move forward"):
        reader.window(10, 5)
    with pytest.raises(ValueError, match="forgotten"):
        reader.peek(10, 5)


def test_a_chunk_of_another_dtype_is_converted():
    reader = ForwardAudio(iter([np.arange(4, dtype=np.float64), np.arange(4, dtype=np.int16)]))
    window = reader.window(2, 4)
    assert window.dtype == np.float32
    np.testing.assert_array_equal(window, [2, 3, 0, 1])
