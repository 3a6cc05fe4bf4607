"""``segments, info = model.transcribe(audio, **faster-whisper's keywords)``: the segments a
generator that decodes as it is read, ``info`` known on return, every keyword of
faster-whisper's ``WhisperModel.transcribe`` taken or refused with its reason."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import oasr
from oasr.api.keywords import REFUSED, TAKEN
from tests.helpers.tiny_whisper import torch_threads
from tests.transcribe.conftest import clip, write_tiny_bundle

SHORT = ("1688-142285-0002", "1688-142285-0003", "1688-142285-0004")
FASTER_WHISPER = Path(__file__).parents[1] / "fixtures" / "faster_whisper_transcribe.json"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bundle(tmp_path_factory.mktemp("bundle") / "tiny", window_s=6.0)


@pytest.fixture(scope="module")
def model(bundle) -> oasr.api.Model:
    return oasr.load(str(bundle), device="cpu", language_check=False)


@pytest.fixture(scope="module")
def long_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pieces = [sf.read(clip(c), dtype="float32")[0] for c in SHORT]
    path = tmp_path_factory.mktemp("long") / "long.wav"
    sf.write(path, np.concatenate(pieces), 16000)
    return path


def test_every_faster_whisper_keyword_is_taken_or_refused_with_a_reason():
    recorded = json.loads(FASTER_WHISPER.read_text(encoding="utf-8"))["keywords"]
    unserved = sorted(set(recorded) - set(TAKEN) - set(REFUSED))
    assert not unserved, f"faster-whisper keywords neither taken nor refused: {unserved}"
    assert not set(TAKEN) & set(REFUSED)
    assert all(reason.strip() for reason in REFUSED.values())


def test_a_refused_keyword_names_its_reason_and_an_unknown_one_the_valid_ones(model, long_path):
    with pytest.raises(ValueError, match=r"transcribe\(clip_timestamps=...\): not served"):
        model.transcribe(long_path, clip_timestamps="0,5")
    with pytest.raises(TypeError, match="unknown option.*beam_sise.*valid: .*beam_size"):
        model.transcribe(long_path, beam_sise=2)
    with pytest.raises(ValueError, match="vad_filter=True"):
        model.transcribe(long_path, vad_parameters={"threshold": 0.6})


def test_segments_are_decoded_as_they_are_read(model, long_path, monkeypatch):
    engine = model.engine
    submitted = []
    add = engine.add_request
    monkeypatch.setattr(engine, "add_request", lambda r: (submitted.append(r), add(r))[1])
    segments, info = model.transcribe(long_path)
    # info needs the first window only (its language); nothing else is decoded yet.
    assert len(submitted) == 1
    assert info.language == "en"
    assert info.duration == pytest.approx(sf.info(long_path).duration, abs=1e-3)
    assert info.duration_after_vad == info.duration and info.vad_options is None
    first = next(segments)
    assert len(submitted) == 1 and first.id == 0 and first.seek == 0.0
    rest = list(segments)
    assert len(submitted) > 1  # the later windows were decoded while reading
    got = [first, *rest]
    assert [s.id for s in got] == list(range(len(got)))
    assert all(a.end <= b.start + 1e-6 for a, b in zip(got, got[1:]))
    assert got[-1].end <= info.duration + 1e-6
    eager = model.transcript(long_path)
    assert [(s.start, s.end, s.text) for s in got] == [
        (s.start, s.end, s.text) for s in eager.segments]
    assert all(s.temperature == 0.0 and s.compression_ratio is not None for s in got)


def test_beam_size_per_call_shares_the_weights(bundle, model):
    path = clip(SHORT[0])
    segments, _ = model.transcribe(path, beam_size=2)
    per_call = " ".join(s.text for s in segments)
    loaded = oasr.load(str(bundle), device="cpu", language_check=False, beam_size=2)
    assert per_call == loaded.transcript(path).text
    from oasr.transcribe.options import DecodeOptions

    engine = model.session.engine_for(DecodeOptions(beam_size=2))
    assert engine is not model.engine and engine.loaded is model.engine.loaded


@pytest.mark.skipif(importlib.util.find_spec("silero_vad") is None,
                    reason="needs pip install 'oasr[vad]' (silero-vad)")
def test_vad_filter_and_parameters_match_the_loaded_detector(bundle, model, long_path):
    segments, info = model.transcribe(long_path, vad_filter=True,
                                      vad_parameters={"min_silence_duration_ms": 300,
                                                      "speech_pad_ms": 100})
    per_call = [(s.start, s.end, s.text) for s in segments]
    assert info.vad_options == {"vad": "silero", "min_silence_ms": 300.0,
                                "speech_pad_ms": 100.0}
    assert 0 < info.duration_after_vad < info.duration
    loaded = oasr.load(str(bundle), device="cpu", language_check=False, vad="silero",
                       vad_min_silence_ms=300, vad_speech_pad_ms=100)
    assert per_call == [(s.start, s.end, s.text) for s in loaded.transcript(long_path).segments]
