"""Where ``transcribe`` cuts a long recording into windows.

A family without Whisper's timestamp mode (CTC, WeNet Conformer) cannot say where to resume, so
a recording is decoded in consecutive windows, each cut at the quietest 20 ms of its last 2 s.
Whisper resumes from its last closed timestamp, moved back to the end of a pause just before it
when the timestamp fell inside the next utterance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.transcribe.audio_window import quiet_cut
from tests.helpers.data import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
WENET = ROOT / "tests" / "fixtures" / "wenet_tiny" / "u2pp_conv2d4"
LONGFORM = SHARED_DATA / "longform" / "librispeech-test-other-70.flac"


def test_quiet_cut_finds_the_silence_in_the_tail():
    sr = 16000
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(10 * sr).astype(np.float32)
    audio[int(8.5 * sr):int(8.7 * sr)] = 0.0
    cut = quiet_cut(audio, sr)
    assert int(8.5 * sr) <= cut < int(8.7 * sr)
    assert quiet_cut(audio[:100], sr) == 100  # too short to search: keep it whole


@pytest.mark.skipif(not LONGFORM.is_file(), reason="needs ../shared/data/longform")
def test_conformer_long_recording_in_windows_with_word_times(tmp_path):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "long", "audio_filepath": str(LONGFORM),
                                    "offset": 10.0, "duration": 65.0}) + "\n")
    out = tmp_path / "out.parquet"
    result = CliRunner().invoke(app, ["transcribe", str(manifest), "-o", str(out), "--model",
                                      str(WENET), "--device", "cpu", "--no-progress"])
    assert result.exit_code == 0, result.output
    row = pq.read_table(out).to_pylist()[0]
    assert row["error"] is None
    # Segments are phrases of the words (the 30 s windows are bookkeeping): in order, never
    # overlapping, on the recording's clock.
    segs = row["segments"]
    assert segs and segs[0]["start"] >= 10.0 and segs[-1]["end"] <= 75.0 + 0.02
    assert all(s["start"] < s["end"] for s in segs)
    assert all(a["end"] <= b["start"] for a, b in zip(segs, segs[1:]))
    words = row["words"]
    assert words and all(10.0 <= w["start"] <= w["end"] <= 75.0 + 1e-6 for w in words)
    assert all(a["end"] <= b["start"] for a, b in zip(words, words[1:]))
    assert " ".join(s["text"] for s in segs if s["text"]) == row["text"]


def test_whisper_resumes_at_the_pause_before_a_late_timestamp():
    """Whisper closed its last segment at 5.0 s, 0.3 s into the next utterance (speech resumes
    at 4.7 s after a pause from 4.0 s); the last timed word ended before the pause."""
    from oasr.transcribe.audio_window import resume_before_onset

    sr = 16000
    rng = np.random.default_rng(1)
    # Speech-like: noise under a 4 Hz syllable envelope (stationary noise is a noise floor).
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * np.arange(8 * sr) / sr)
    envelope[int(3.5 * sr):int(5.2 * sr)] = 1.0  # voiced right up to the pause and from it
    audio = (0.1 * envelope * rng.standard_normal(8 * sr)).astype(np.float32)
    audio[int(4.0 * sr):int(4.7 * sr)] = 0.0
    assert resume_before_onset(audio, sr, 5.0, 3.98) == pytest.approx(4.7)
    # A word timed across the pause keeps Whisper's point (its text is settled up to there).
    assert resume_before_onset(audio, sr, 5.0, 4.9) == 5.0
    # A pause ending more than ONSET_LOOKBACK_S before the point does not move it.
    assert resume_before_onset(audio, sr, 5.5, 3.98) == 5.5


def test_whisper_keeps_a_resume_point_that_lies_in_a_pause():
    """A burst ends one pause at 4.3 s and another pause runs 4.34-5.5 s; Whisper closed its
    segment at 4.6 s, inside the second: the next utterance has not begun, so the window does
    not move back to the burst (its first word would be put there)."""
    from oasr.transcribe.audio_window import resume_before_onset

    sr = 16000
    rng = np.random.default_rng(2)
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * np.arange(8 * sr) / sr)
    audio = (0.1 * envelope * rng.standard_normal(8 * sr)).astype(np.float32)
    # Two pauses at a -60 dB noise floor with a 40 ms burst at about -35 dB between them.
    audio[int(3.9 * sr):int(5.5 * sr)] = 0.001 * rng.standard_normal(int(1.6 * sr))
    audio[int(4.3 * sr):int(4.34 * sr)] *= 18
    assert resume_before_onset(audio, sr, 4.6, 3.88) == 4.6
    # Past the second pause's end (speech again), the rule moves back to that pause's end.
    assert resume_before_onset(audio, sr, 5.8, 3.88) == pytest.approx(5.5)
