"""The segmenter against synthetic probability traces (no model, no audio)."""

import numpy as np
import pytest

from oasr.vad.segmenter import SegmenterConfig, segment, speech_frames

FRAME = 0.01  # 10 ms frames: frame counts read as centiseconds


def trace(*runs: tuple[float, int]) -> np.ndarray:
    """Concatenate (probability, frames) runs."""
    return np.concatenate([np.full(n, p, dtype=np.float32) for p, n in runs])


def assert_segments(got, want):
    assert len(got) == len(want), got
    assert np.allclose(np.array(got, dtype=float), np.array(want, dtype=float), atol=1e-6), got


def test_one_segment_with_padding():
    probs = trace((0.0, 100), (0.9, 50), (0.0, 100))
    cfg = SegmenterConfig(speech_pad_ms=30)
    assert_segments(segment(probs, FRAME, 2.5, cfg), [(0.97, 1.53)])


def test_hysteresis_keeps_a_segment_open_between_the_thresholds():
    # 0.4 is below threshold 0.5 but above neg_threshold 0.35: no silence is counted.
    probs = trace((0.9, 30), (0.4, 60), (0.9, 30), (0.0, 50))
    cfg = SegmenterConfig(min_silence_ms=100, speech_pad_ms=0)
    assert speech_frames(probs, cfg, FRAME) == [(0, 120)]
    # Below neg_threshold the same 60 frames are a pause long enough to split.
    probs[30:90] = 0.2
    assert speech_frames(probs, cfg, FRAME) == [(0, 30), (90, 120)]


def test_short_silence_bridged_and_short_speech_dropped():
    probs = trace((0.9, 40), (0.0, 5), (0.9, 40), (0.0, 50), (0.9, 10), (0.0, 50))
    cfg = SegmenterConfig(min_silence_ms=100, min_speech_ms=250, speech_pad_ms=0)
    # The 50 ms gap does not split; the 100 ms blip is shorter than min speech.
    assert speech_frames(probs, cfg, FRAME) == [(0, 85)]


def test_detector_floor_lengthens_min_silence():
    probs = trace((0.9, 30), (0.0, 15), (0.9, 30), (0.0, 40))
    cfg = SegmenterConfig(min_silence_ms=100, min_speech_ms=0, speech_pad_ms=0)
    assert speech_frames(probs, cfg, FRAME) == [(0, 30), (45, 75)]
    assert speech_frames(probs, cfg, FRAME, min_silence_floor_ms=200) == [(0, 75)]


def test_max_segment_splits_at_the_least_speechlike_frame():
    probs = trace((0.9, 500), (0.0, 200))
    probs[320] = 0.45  # the quietest frame in the second half of the first 5 s
    cfg = SegmenterConfig(max_segment_s=4.0, speech_pad_ms=0, min_speech_ms=0)
    spans = speech_frames(probs, cfg, FRAME)
    assert spans == [(0, 320), (320, 500)]
    assert all((e - s) * FRAME <= 4.0 for s, e in spans)


def test_padding_splits_a_narrow_gap_in_the_middle_and_clamps_to_the_recording():
    probs = trace((0.9, 50), (0.0, 20), (0.9, 50))
    cfg = SegmenterConfig(min_silence_ms=100, speech_pad_ms=200, min_speech_ms=0)
    segs = segment(probs, FRAME, 1.2, cfg)
    assert_segments(segs, [(0.0, 0.6), (0.6, 1.2)])


def test_no_speech_gives_no_segment():
    assert segment(np.full(300, 0.2, np.float32), FRAME, 3.0) == []
    assert segment(np.zeros(0, np.float32), FRAME, 0.0) == []


def test_segment_open_at_the_end_closes_at_the_recording_end():
    probs = trace((0.0, 50), (0.9, 50))
    assert_segments(segment(probs, FRAME, 1.0, SegmenterConfig(speech_pad_ms=0)), [(0.5, 1.0)])


def test_config_validation():
    with pytest.raises(ValueError, match="threshold"):
        SegmenterConfig(threshold=1.5)
    with pytest.raises(ValueError, match="neg_threshold"):
        SegmenterConfig(threshold=0.5, neg_threshold=0.6)
    with pytest.raises(ValueError, match="max_segment_s"):
        SegmenterConfig(max_segment_s=0)
