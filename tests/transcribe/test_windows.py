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
    segs = row["segments"]
    assert len(segs) == 3  # 65 s in windows of at most 30 s
    assert segs[0]["start"] == pytest.approx(10.0)
    assert all(a["end"] == pytest.approx(b["start"]) for a, b in zip(segs, segs[1:]))
    assert segs[-1]["end"] == pytest.approx(75.0, abs=0.02)
    assert all(28.0 <= s["end"] - s["start"] <= 30.0 for s in segs[:-1])
    words = row["words"]
    assert words and all(10.0 <= w["start"] <= w["end"] <= 75.0 + 1e-6 for w in words)
    assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))
    assert " ".join(s["text"] for s in segs if s["text"]) == row["text"]


def test_whisper_resumes_at_the_pause_before_a_late_timestamp():
    """Whisper closed its last segment at 5.0 s, 0.3 s into the next utterance (speech resumes
    at 4.7 s after a pause from 4.0 s); the last timed word ended before the pause."""
    from types import SimpleNamespace

    from oasr.engine.request import RequestOutput, WordTiming
    from oasr.transcribe.runner import Transcriber

    sr = 16000
    rng = np.random.default_rng(1)
    # Speech-like: noise under a 4 Hz syllable envelope (stationary noise is a noise floor).
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * np.arange(8 * sr) / sr)
    envelope[int(3.5 * sr):int(5.2 * sr)] = 1.0  # voiced right up to the pause and from it
    audio = (0.1 * envelope * rng.standard_normal(8 * sr)).astype(np.float32)
    audio[int(4.0 * sr):int(4.7 * sr)] = 0.0
    t = Transcriber.__new__(Transcriber)
    t.sr = sr
    state = SimpleNamespace(seek=0, window_len=len(audio),
                            reader=SimpleNamespace(window=lambda seek, n: audio[seek:seek + n]))
    out = RequestOutput("r", resume_at=5.0, words=[WordTiming("end.", 3.2, 3.98, 0.9)])
    assert t._resume_before_onset(state, out, 5 * sr) == int(4.7 * sr)
    # A word timed across the pause keeps Whisper's point (its text is settled up to there).
    out.words = [WordTiming("end.", 3.2, 4.9, 0.9)]
    assert t._resume_before_onset(state, out, 5 * sr) == 5 * sr
    # A pause ending more than ONSET_LOOKBACK_S before the point does not move it.
    out.words = [WordTiming("end.", 3.2, 3.98, 0.9)]
    assert t._resume_before_onset(state, out, int(5.5 * sr)) == int(5.5 * sr)


def test_whisper_keeps_a_resume_point_that_lies_in_a_pause():
    """A burst ends one pause at 4.3 s and another pause runs 4.34-5.5 s; Whisper closed its
    segment at 4.6 s, inside the second: the next utterance has not begun, so the window does
    not move back to the burst (its first word would be put there)."""
    from types import SimpleNamespace

    from oasr.engine.request import RequestOutput, WordTiming
    from oasr.transcribe.runner import Transcriber

    sr = 16000
    rng = np.random.default_rng(2)
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * np.arange(8 * sr) / sr)
    audio = (0.1 * envelope * rng.standard_normal(8 * sr)).astype(np.float32)
    # Two pauses at a -60 dB noise floor with a 40 ms burst at about -35 dB between them.
    audio[int(3.9 * sr):int(5.5 * sr)] = 0.001 * rng.standard_normal(int(1.6 * sr))
    audio[int(4.3 * sr):int(4.34 * sr)] *= 18
    t = Transcriber.__new__(Transcriber)
    t.sr = sr
    state = SimpleNamespace(seek=0, window_len=len(audio),
                            reader=SimpleNamespace(window=lambda seek, n: audio[seek:seek + n]))
    out = RequestOutput("r", resume_at=4.6, words=[WordTiming("end.", 3.2, 3.88, 0.9)])
    assert t._resume_before_onset(state, out, int(4.6 * sr)) == int(4.6 * sr)
    # Past the second pause's end (speech again), the rule moves back to that pause's end.
    assert t._resume_before_onset(state, out, int(5.8 * sr)) == int(5.5 * sr)
