"""The CTC-blank detector and its silence floor through the shared segmenter."""

import math

import numpy as np
import torch

from oasr.vad import VADS, build_detector
from oasr.vad.segmenter import SegmenterConfig, speech_frames

FRAME = 0.04


def _log_probs(speech_frames_mask, vocab=5, blank=0):
    """A peaky CTC posterior: blank everywhere except one token spike every 5th speech frame."""
    t = len(speech_frames_mask)
    probs = torch.full((t, vocab), 0.01)
    probs[:, blank] = 0.96
    for i, s in enumerate(speech_frames_mask):
        if s and i % 5 == 0:
            probs[i] = 0.01
            probs[i, 1 + i % (vocab - 1)] = 0.96
    return (probs / probs.sum(-1, keepdim=True)).log()[None]


def test_probability_is_one_minus_blank_and_masked_past_length():
    lp = _log_probs([1] * 6 + [0] * 4)
    det = build_detector("ctc_blank", mode="posthoc")
    out = det.detect_from_asr(lp, torch.tensor([8]), FRAME)
    expected = 1 - lp[0, :, 0].exp()
    assert torch.allclose(out.probs[0, :8], expected[:8], atol=1e-6)
    assert out.probs[0, 8:].abs().max() == 0 and int(out.lengths[0]) == 8


def test_floor_keeps_intra_word_blanks_from_splitting_speech():
    mask = [0] * 10 + [1] * 60 + [0] * 30 + [1] * 30 + [0] * 10
    probs = build_detector("ctc_blank").detect_from_asr(
        _log_probs(mask), torch.tensor([len(mask)]), FRAME).row(0).numpy()
    cfg = SegmenterConfig(min_silence_ms=100, min_speech_ms=0, speech_pad_ms=0)
    naive = speech_frames(probs, cfg, FRAME)
    floor = VADS.get("ctc_blank").min_silence_floor_ms
    floored = speech_frames(probs, cfg, FRAME, min_silence_floor_ms=floor)
    assert len(naive) > 10  # a spike train: every spike its own "segment"
    assert floored == [(10, 66), (100, 126)]
    assert math.isclose(floor, 300.0)
    assert np.all(probs[:10] < 0.1)
