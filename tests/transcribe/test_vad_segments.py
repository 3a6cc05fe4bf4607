"""``oasr transcribe --vad``: gating, chunking and stitching on the recording's clock.

The ASR is the tiny random Whisper (one token a request); the detector is either a test energy
detector registered here (so the segments are known exactly) or the real Silero / FSMN-VAD for
the gating of silence, noise and tones.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from oasr.io import OutputWriter
from oasr.transcribe.rows import NO_SPEECH
from oasr.transcribe.runner import TranscribeOptions, transcribe
from oasr.transcribe.vad_segments import (
    RecordingSegmenter,
    VadTranscriber,
    build_recording_segmenter,
    merge_into_chunks,
)
from oasr.vad import VADS, SpeechDetector, SpeechProbs, VadFraming, VadSpec, register_vad
from oasr.vad.segmenter import SegmenterConfig
from tests.transcribe.conftest import SAMPLE_RATE, write_wav

FRAME = 160  # 10 ms


class EnergyVad(SpeechDetector):
    """P(speech) = 1 for a 10 ms frame with RMS above 0.01, else 0."""

    def __init__(self, device="cpu"):
        pass

    def detect(self, waveforms, lengths, sample_rate):
        n = waveforms.shape[1] // FRAME
        frames = waveforms[:, : n * FRAME].reshape(waveforms.shape[0], n, FRAME)
        probs = (frames.pow(2).mean(-1).sqrt() > 0.01).float()
        return SpeechProbs(probs, lengths // FRAME, FRAME / sample_rate)


@pytest.fixture(scope="module")
def energy():
    register_vad(VadSpec("test-energy-vad", EnergyVad, modes=("presegment",),
                         framing=VadFraming({SAMPLE_RATE: FRAME}, {SAMPLE_RATE: 0})))
    yield "test-energy-vad"
    VADS.unregister("test-energy-vad")


def _bursts(total_s: float, spans: list[tuple[float, float]], seed: int = 0) -> np.ndarray:
    """Noise bursts (``speech`` to the energy detector) at ``spans`` in digital silence."""
    rng = np.random.default_rng(seed)
    audio = np.zeros(int(total_s * SAMPLE_RATE), np.float32)
    for s, e in spans:
        a, b = int(s * SAMPLE_RATE), int(e * SAMPLE_RATE)
        audio[a:b] = 0.2 * rng.standard_normal(b - a)
    return audio


def _run(engine, segmenter, inputs, tmp_path, **options):
    opts = TranscribeOptions(inputs=[str(i) for i in inputs], **options)
    out = tmp_path / "out.parquet"
    stats = transcribe(engine, opts, OutputWriter(out),
                       transcriber=VadTranscriber(engine, opts, segmenter))
    return stats, {r["id"]: r for r in pq.read_table(out).to_pylist()}


def _segmenter(name, **config):
    seg = build_recording_segmenter(name)
    if config:
        seg.config = SegmenterConfig(**config)
    return seg


def test_merge_into_chunks_keeps_each_chunk_within_the_window():
    segs = [(0.0, 4.0), (5.0, 8.0), (9.0, 12.0), (12.5, 13.0), (30.0, 31.0)]
    assert merge_into_chunks(segs, 10.0) == [(0.0, 8.0), (9.0, 13.0), (30.0, 31.0)]
    assert merge_into_chunks([], 10.0) == []


def test_silent_row_is_not_decoded_and_says_no_speech(tiny_engine, energy, tmp_path,
                                                      monkeypatch):
    silent = write_wav(tmp_path / "silent.wav", np.zeros(3 * SAMPLE_RATE, np.float32))
    voiced = write_wav(tmp_path / "voiced.wav", _bursts(3.0, [(1.0, 2.0)]))
    submitted = []
    add = tiny_engine.add_request
    monkeypatch.setattr(tiny_engine, "add_request", lambda r: (submitted.append(r), add(r))[1])
    _, rows = _run(tiny_engine, _segmenter(energy), [silent, voiced], tmp_path)
    assert rows["silent"]["text"] == "" and rows["silent"]["finish_reason"] == NO_SPEECH
    assert rows["silent"]["error"] is None and rows["silent"]["duration"] == pytest.approx(3.0)
    # A short row with speech is decoded whole, as without a detector.
    assert rows["voiced"]["text"] and rows["voiced"]["finish_reason"] != NO_SPEECH
    assert [len(r.audio) for r in submitted] == [3 * SAMPLE_RATE]


def test_long_row_is_cut_at_pauses_batched_and_stitched_on_the_clock(tiny_engine, energy,
                                                                   tmp_path, monkeypatch):
    # The tiny engine's window is 10 s; bursts make three chunks after merging.
    spans = [(1.0, 4.0), (5.0, 9.0), (14.0, 20.0), (27.0, 28.0)]
    path = write_wav(tmp_path / "long.wav", _bursts(32.0, spans))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "part", "audio": str(path), "offset": 0.5,
                                    "duration": 31.0}) + "\n")
    submitted = []
    add = tiny_engine.add_request
    monkeypatch.setattr(tiny_engine, "add_request", lambda r: (submitted.append(r), add(r))[1])
    seg = _segmenter(energy, min_silence_ms=300, speech_pad_ms=100, min_speech_ms=0)
    _, rows = _run(tiny_engine, seg, [manifest], tmp_path,
                   search={"prefix": "So", "repetition_penalty": 1.2})
    row = rows["part"]
    assert row["error"] is None and row["duration"] == pytest.approx(31.0)
    # The prefix opens the recording (its first chunk); the other options reach every chunk.
    assert [r.decoding.prefix for r in submitted] == ["So", None, None]
    assert all(r.decoding.repetition_penalty == 1.2 for r in submitted)
    assert row["segments"][0]["text"].startswith("So")
    # Segment times are on the recording's clock (the row starts 0.5 s in): chunks decode in
    # timestamp mode, so each chunk's segments lie within the chunk, in order.
    chunks = [(0.9, 9.1), (13.9, 20.1), (26.9, 28.1)]
    got = [(s["start"], s["end"]) for s in row["segments"]]
    assert all(a < b for a, b in got), got
    assert all(a[1] <= b[0] for a, b in zip(got, got[1:])), got
    assert all(any(c0 - 0.011 <= a and b <= c1 + 0.011 for c0, c1 in chunks) for a, b in got), got
    assert " ".join(s["text"] for s in row["segments"]).split() == row["text"].split()
    # All three chunks went to the engine before any finished: one recording, one batch.
    assert len(submitted) == 3
    assert [len(r.audio) / SAMPLE_RATE for r in submitted] == pytest.approx(
        [e - s for s, e in chunks], abs=0.011)


def _non_speech(kind: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(30 * SAMPLE_RATE) / SAMPLE_RATE
    if kind == "silence":
        return np.zeros(len(t), np.float32)
    if kind == "noise":
        return (0.1 * rng.standard_normal(len(t))).astype(np.float32)
    notes = 220.0 * 2 ** (np.array([0, 4, 7, 12, 7, 4, 0, 5]) / 12)  # an arpeggio, 0.5 s a note
    f = notes[(t / 0.5).astype(int) % len(notes)]
    return (0.2 * (np.sin(2 * np.pi * f * t) + 0.5 * np.sin(4 * np.pi * f * t)) / 1.5).astype(
        np.float32)


@pytest.mark.parametrize("name,kind", [
    ("silero", "silence"), ("silero", "noise"), ("silero", "tones"),
    ("fsmn", "silence"), ("fsmn", "noise"),
    pytest.param("fsmn", "tones", marks=pytest.mark.xfail(
        strict=True, reason="FSMN-VAD scores sustained harmonic tones as speech (P > 0.8)")),
])
def test_silence_noise_and_tones_give_empty_text(tiny_engine, tmp_path, name, kind):
    from oasr.vad import MissingWeightsError

    try:
        seg = build_recording_segmenter(name)
    except MissingWeightsError as exc:
        pytest.skip(str(exc))
    path = write_wav(tmp_path / f"{kind}.wav", _non_speech(kind))
    _, rows = _run(tiny_engine, seg, [path], tmp_path)
    row = rows[kind]
    assert row["text"] == "", row
    assert row["finish_reason"] == NO_SPEECH and row["segments"] == []


def test_asr_derived_detector_cannot_presegment():
    with pytest.raises(ValueError, match="cannot serve mode 'presegment'"):
        build_recording_segmenter("ctc_blank")
    with pytest.raises(ValueError, match="cannot pre-segment"):
        RecordingSegmenter(SpeechDetector(), "ctc_blank")


def test_detector_sees_audio_at_its_own_rate(energy):
    seen = {}

    class Spy(EnergyVad):
        def detect(self, waveforms, lengths, sample_rate):
            seen["rate"], seen["n"] = sample_rate, waveforms.shape[1]
            return super().detect(waveforms, lengths, sample_rate)

    seg = RecordingSegmenter(Spy(), energy)
    rec = seg(_bursts(2.0, [(0.5, 1.5)]).astype(np.float32)[::2].copy(), 8000, 30.0)
    assert seen == {"rate": SAMPLE_RATE, "n": 2 * SAMPLE_RATE}  # resampled 8 -> 16 kHz
    assert rec.duration_s == pytest.approx(2.0) and len(rec.segments) == 1


def test_rows_are_detected_in_batches_and_unreadable_rows_become_errors(tiny_engine, energy,
                                                                       tmp_path):
    calls = []

    class Counting(EnergyVad):
        def detect(self, waveforms, lengths, sample_rate):
            calls.append(waveforms.shape[0])
            return super().detect(waveforms, lengths, sample_rate)

    paths = [write_wav(tmp_path / f"r{i}.wav", _bursts(2.0 + i, [(0.5, 1.5)] if i % 2 else []))
             for i in range(5)]
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"not audio")
    seg = RecordingSegmenter(Counting(), energy)
    _, rows = _run(tiny_engine, seg, [*paths, broken], tmp_path)
    assert calls == [5]  # five readable rows, one padded detector call
    assert rows["broken"]["error"] and rows["broken"]["text"] is None
    for i in range(5):
        row = rows[f"r{i}"]
        assert row["duration"] == pytest.approx(2.0 + i)
        assert (row["finish_reason"] == NO_SPEECH) == (i % 2 == 0)


def test_vad_options_reach_the_segmenter(energy):
    from dataclasses import replace

    from oasr.transcribe.options import VadOptions
    from oasr.transcribe.vad_segments import PRESEGMENT

    options = VadOptions(vad=energy, vad_min_silence_ms=500, vad_speech_pad_ms=50,
                         vad_max_segment_s=3.0)
    seg = build_recording_segmenter(energy, overrides=options.segmenter_overrides())
    assert seg.config == replace(PRESEGMENT, threshold=seg.detector.default_threshold,
                                 min_silence_ms=500.0, speech_pad_ms=50.0, max_segment_s=3.0)
    # 8 s of unbroken speech: split at the user's 3 s, under the 10 s window.
    rec = seg(_bursts(10.0, [(1.0, 9.0)]), SAMPLE_RATE, 10.0)
    assert len(rec.segments) >= 3 and all(e - s <= 3.0 + 1e-6 for s, e in rec.segments)
    assert rec.segments[0][0] <= 1.0 and rec.segments[-1][1] >= 9.0
    # The window still bounds a larger user value: as if the user had said the window.
    wide = build_recording_segmenter(energy, overrides={"max_segment_s": 60.0})
    window = build_recording_segmenter(energy, overrides={"max_segment_s": 4.0})
    audio = _bursts(10.0, [(1.0, 9.0)])
    assert wide(audio, SAMPLE_RATE, 4.0) == window(audio, SAMPLE_RATE, 60.0)
    with pytest.raises(ValueError, match="neg_threshold"):
        build_recording_segmenter(energy, overrides={"threshold": 0.3, "neg_threshold": 0.6})


def test_vad_flags_are_checked_before_anything_loads(tmp_path):
    from typer.testing import CliRunner

    from oasr.cli.app import app

    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"id": "a", "audio": "a.wav"}\n')
    for flags, message in ((["--vad-threshold", "1.5"], "--vad-threshold 1.5: must be in (0, 1)"),
                           (["--vad-min-silence-ms", "-1"], "--vad-min-silence-ms -1.0: must be"),
                           (["--vad-max-segment-s", "0"], "--vad-max-segment-s 0.0: must be > 0")):
        result = CliRunner().invoke(app, ["transcribe", str(manifest), "-o",
                                          str(tmp_path / "o.parquet"), *flags])
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
