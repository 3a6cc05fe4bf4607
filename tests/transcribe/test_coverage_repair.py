"""Coverage repair end to end on a scripted engine (tests/transcribe/scripted_engine.py): a
window that skips speech has the stretch decoded again on its own, a window that stops short
makes the next window start at the speech it skipped, speech nothing transcribes is reported,
and VAD-batched chunks joined inside speech lose and double no word."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from oasr.io import ManifestRow
from oasr.transcribe.coverage import CoverageCheck, EnergySpeech
from oasr.transcribe.repair import PAD_S, REPAIR_TEMPERATURES
from oasr.transcribe.runner import TranscribeOptions, Transcriber
from oasr.transcribe.vad_segments import VadTranscriber
from tests.transcribe.scripted_engine import (
    SR,
    FixedSegmenter,
    ScriptedEngine,
    burst_audio,
    find_bursts,
)


def _row(tmp_path: Path, bursts: list[tuple[float, float]], seconds: float) -> ManifestRow:
    path = tmp_path / "rec.wav"
    sf.write(path, burst_audio(bursts, seconds), SR, subtype="FLOAT")
    return ManifestRow("rec", str(path), source=str(path))


def _options(lone_letters: int = 0, **kw) -> TranscribeOptions:
    # The scripted words are two-letter names over bursts of 0.7-1.5 s, each alone in its run
    # of sound: the lone-word rule would decode every one again. Off but where tested.
    check = CoverageCheck(EnergySpeech()).with_rules(lone_letters=lone_letters)
    return TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                             coverage=check, **kw)


def _run(transcriber: Transcriber, row: ManifestRow):
    outs = list(transcriber.run(iter([row])))
    assert len(outs) == 1
    return outs[0][0]


def _is_repair(request) -> bool:
    return "repair" in request.metadata


def test_a_window_that_skips_speech_has_the_stretch_decoded_again(tmp_path):
    row = _row(tmp_path, [(0.5, 2.0), (3.0, 4.5), (5.5, 7.0)], 8.0)
    # The window's decode skips the middle word; a decode of that stretch alone hears it.
    engine = ScriptedEngine(lambda req, k: _is_repair(req) or k != 1)
    settled = []
    out = _run(Transcriber(engine, _options(on_settled=settled.append)), row)
    assert out.text == "w0 w1 w2"
    assert [w["word"] for w in out.words] == ["w0", "w1", "w2"]
    assert out.coverage == 1.0 and not out.warnings
    window, repair = engine.requests
    assert not _is_repair(window) and _is_repair(repair)
    # Its own audio (the stretch and the pauses around it, short of the words beside it),
    # no prompt, no timestamps, the first repair temperature.
    assert 2.0 * SR <= len(repair.audio) <= 2.6 * SR
    assert repair.decoding.prompt is None and not repair.decoding.timestamps
    assert repair.decoding.temperature == REPAIR_TEMPERATURES[0]
    # Reported once, with the repair's words in place, segments in order.
    assert len(settled) == 1 and [w["word"] for w in settled[0].words] == ["w0", "w1", "w2"]
    segs = out.segments
    assert all(a["end"] <= b["start"] for a, b in zip(segs, segs[1:]))
    assert " ".join(s["text"] for s in segs) == out.text


def test_speech_nothing_transcribes_is_reported(tmp_path):
    row = _row(tmp_path, [(0.5, 2.0), (3.0, 4.5), (5.5, 7.0)], 8.0)
    engine = ScriptedEngine(lambda req, k: k != 1)  # the repairs do not hear it either
    transcriber = Transcriber(engine, _options())
    out = _run(transcriber, row)
    assert out.text == "w0 w2"
    repairs = [r for r in engine.requests if _is_repair(r)]
    # Every repair temperature was tried, sampled ones seeded.
    assert [r.decoding.temperature for r in repairs] == list(REPAIR_TEMPERATURES)
    assert all((r.decoding.seed is not None) == (r.decoding.temperature > 0) for r in repairs)
    assert out.coverage is not None and 0.6 < out.coverage < 0.8  # 1.5 of ~4.5 s left out
    assert len(out.warnings) == 1 and "3.0-4.5 s" in out.warnings[0]
    assert transcriber.coverage_warnings == 1 and transcriber.repairs == 0


def _lone_row(tmp_path: Path) -> ManifestRow:
    # One run of sound (the bursts 0.1 s apart, under the energy rule's 0.16-s pause): w0,
    # then w1 and w2; a decode that hears w0 alone lays it over the run.
    return _row(tmp_path, [(0.5, 1.0), (1.1, 1.5), (1.6, 2.0), (3.5, 4.2)], 5.0)


def _lone_engine(repair_hears):
    def hears(req, k):
        if _is_repair(req):
            return repair_hears(k)
        return k in (0, 3)
    engine = ScriptedEngine(hears)
    original = engine.decode

    def decode(request):  # the aligner stretches the window's w0 over the whole run
        out = original(request)
        if not _is_repair(request) and out.words:
            out.words[0].end = 1.9
        return out
    engine.decode = decode
    return engine


def test_a_lone_short_word_over_a_run_has_the_run_decoded_again(tmp_path):
    row = _lone_row(tmp_path)
    engine = _lone_engine(lambda k: True)
    out = _run(Transcriber(engine, _options(lone_letters=3)), row)
    # w0 covers the run (1.5 s, within max_word_s): only the lone-word rule finds the skip.
    repairs = [r for r in engine.requests if _is_repair(r)]
    assert len(repairs) == 1
    # The repair reads w0 w1 w2; w0 is the window's already, so only w1 w2 are added.
    assert out.text == "w0 w1 w2 w3"
    assert [w["word"] for w in out.words] == ["w0", "w1", "w2", "w3"]
    assert out.coverage == 1.0 and not out.warnings
    # Off, the skip stays: nothing decoded again, w0 passes for the run.
    engine = _lone_engine(lambda k: True)
    out = _run(Transcriber(engine, _options(lone_letters=0)), row)
    assert out.text == "w0 w3" and not [r for r in engine.requests if _is_repair(r)]


@pytest.mark.parametrize("repair_hears", [lambda k: k == 0, lambda k: False])
def test_a_lone_words_repair_that_adds_nothing_new_is_dropped(tmp_path, repair_hears):
    # The repair re-reads only the lone word, or reads nothing: the word stands, the row
    # carries no warning and its coverage counts the word's cover.
    row = _lone_row(tmp_path)
    engine = _lone_engine(repair_hears)
    out = _run(Transcriber(engine, _options(lone_letters=3)), row)
    assert [r for r in engine.requests if _is_repair(r)]
    assert out.text == "w0 w3" and out.coverage == 1.0 and not out.warnings


@pytest.mark.parametrize("lone_letters", [0, 3])
def test_a_frame_synchronous_family_is_measured_not_decoded_again(tmp_path, lone_letters):
    """CTC and transducers score every frame: a stretch they left uncovered is reported, and
    never decoded apart from its context (the upstream recipe decodes the whole); a lone
    word's run is no stretch to report (w0 and w2 are each alone in 1.5 s)."""
    row = _row(tmp_path, [(0.5, 2.0), (3.0, 4.5), (5.5, 7.0)], 8.0)
    engine = ScriptedEngine(lambda req, k: _is_repair(req) or k != 1, incremental=False)
    transcriber = Transcriber(engine, _options(lone_letters=lone_letters))
    out = _run(transcriber, row)
    assert out.text == "w0 w2"
    assert not [r for r in engine.requests if _is_repair(r)]
    assert out.coverage is not None and 0.6 < out.coverage < 0.8
    assert len(out.warnings) == 1 and "3.0-4.5 s" in out.warnings[0]


def test_a_window_that_stops_short_resumes_at_the_speech_it_skipped(tmp_path):
    bursts = [(0.5 + 1.5 * i, 1.5 + 1.5 * i) for i in range(12)]  # to 18 s
    row = _row(tmp_path, bursts, 19.0)
    # The first window (0-10 s) decodes its first three words and stops: what follows in it
    # is speech no word covers, so the next window starts there instead of at 10 s.
    engine = ScriptedEngine(lambda req, k: req.metadata.get("window") != 0 or k < 3)
    out = _run(Transcriber(engine, _options()), row)
    assert [w["word"] for w in out.words] == [f"w{k}" for k in range(12)]
    windows = [r for r in engine.requests if not _is_repair(r)]
    assert len(windows) == 3 and not any(_is_repair(r) for r in engine.requests)
    # The second window starts PAD_S before the first skipped word (5.0 s): its first word
    # lies 0.25 s into it.
    assert len(windows[0].audio) / SR >= 9.0
    assert find_bursts(windows[1].audio)[0][1] == pytest.approx(PAD_S, abs=0.03)
    assert out.coverage == 1.0
    starts = [w["start"] for w in out.words]
    assert starts == sorted(starts) and abs(starts[3] - 5.0) < 0.05


@pytest.mark.parametrize("timed", [True, False])
def test_a_vad_chunk_join_inside_speech_loses_and_doubles_no_word(tmp_path, timed):
    # Continuous speech (0.3 s words, 0.1 s apart) split at 10.97 s, inside word 27
    # (10.85-11.15): the chunks overlap there and the word is kept once, decoded whole.
    bursts = [(0.05 + 0.4 * i, 0.35 + 0.4 * i) for i in range(50)]  # to 20 s
    row = _row(tmp_path, bursts, 20.2)
    engine = ScriptedEngine(lambda req, k: True, window_s=13.0)
    segmenter = FixedSegmenter([(0.0, 10.97), (10.97, 20.2)], [(0.0, 20.2)])
    options = _options() if timed else TranscribeOptions(inputs=[], decode_workers=0)
    out = _run(VadTranscriber(engine, options, segmenter), row)
    chunks = [r for r in engine.requests if not _is_repair(r)]
    assert len(chunks) == 2
    if not timed:
        # Without word times nothing tells the sides apart: no overlap is read, and the word
        # the join cuts comes out as two fragments (what the overlap exists to prevent).
        assert sum(len(c.audio) for c in chunks) == int(20.2 * SR)
        assert "w27~ w27~" in out.text
        return
    assert len(chunks[0].audio) / SR == pytest.approx(11.97, abs=0.01)
    assert [w["word"] for w in out.words] == [f"w{k}" for k in range(50)]
    assert out.text == " ".join(f"w{k}" for k in range(50))
    assert out.coverage == 1.0


class _ThreadedSpeech(EnergySpeech):
    """The energy detector, recording which thread called it and on how many samples."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __call__(self, audio, sample_rate):
        import threading

        self.calls.append((threading.current_thread().name, len(audio)))
        return super().__call__(audio, sample_rate)


def test_a_windows_speech_is_detected_off_the_engines_thread_while_it_decodes(tmp_path):
    row = _row(tmp_path, [(0.5, 2.0), (3.0, 4.5), (5.5, 7.0)], 8.0)
    detector = _ThreadedSpeech()
    engine = ScriptedEngine(lambda req, k: _is_repair(req) or k != 1)
    options = TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                                coverage=CoverageCheck(detector))
    out = _run(Transcriber(engine, options), row)
    # The same outcome as on the caller's thread (the first test), from one detection of the
    # window, made on the coverage thread (submitted when the window went to the engine).
    assert out.text == "w0 w1 w2" and out.coverage == 1.0
    assert [n for _, n in detector.calls] == [8 * SR]
    assert all(name.startswith("oasr-coverage") for name, _ in detector.calls)


class _BlockSpeech:
    """Speech = fixed spans of the recording (seconds), reported per block it is handed;
    records each block's first sample value and length (blocks are on a fixed grid)."""

    device = "cpu"
    name = "scripted"

    def __init__(self, spans, sr) -> None:
        self.spans, self.sr = spans, sr
        self.calls: list[tuple[float, int]] = []

    def __call__(self, audio, sample_rate):
        start = float(audio[0]) / sample_rate  # the test's audio is its own sample index
        self.calls.append((start, len(audio)))
        end = start + len(audio) / sample_rate
        return [(max(a, start) - start, min(b, end) - start)
                for a, b in self.spans if b > start and a < end]


@pytest.mark.parametrize("threaded", [False, True])
def test_speech_is_detected_in_window_blocks_ahead_of_the_seek(threaded):
    from oasr.transcribe.audio_window import ForwardAudio
    from oasr.transcribe.repair import RowCoverage
    from oasr.transcribe.speech_ahead import SpeechAhead

    sr = 100  # samples are their own index, so a block knows where it begins
    audio = np.arange(350, dtype=np.float32)
    reader = ForwardAudio(iter([audio[:120], audio[120:]]))
    detector = _BlockSpeech([(0.2, 1.5), (2.0, 2.1), (2.9, 3.5)], sr)
    ahead = SpeechAhead(detector, sr) if threaded else None
    try:
        coverage = RowCoverage(CoverageCheck(detector), sr, window_s=1.0, ahead=ahead)
        coverage.detect_ahead(0 + 2 * 100, reader.peek)  # the first window and the next
        reader.window(0, 100)
        assert coverage.detect(0, 100, offset=10.0) == [(10.2, 11.0)]
        # The next window starts inside block 1; its blocks were handed before the seek moved.
        coverage.detect_ahead(50 + 2 * 100, reader.peek)
        reader.window(50, 100)
        # Spans meeting at the block edge (1.0 s) are one; clipped to the window.
        assert coverage.detect(50, 100) == [(0.5, 1.5)]
        coverage.detect_ahead(250 + 2 * 100, reader.peek)
        reader.window(250, 100)
        assert coverage.detect(250, 100) == [(2.9, 3.5)]
        # Every sample detected once, in blocks of the window on its grid; none beyond the end.
        assert sorted(detector.calls) == [(0.0, 100), (1.0, 100), (2.0, 100), (3.0, 50)]
        with pytest.raises(ValueError, match="forgotten"):
            reader.peek(100, 10)
        # Past the end there is nothing to detect; a window nothing was handed for is refused.
        assert coverage.detect(300, 100) == [(3.0, 3.5)]
        fresh = RowCoverage(CoverageCheck(detector), sr, window_s=1.0)
        with pytest.raises(RuntimeError, match="never handed to the detector"):
            fresh.detect(0, 100)
    finally:
        if ahead is not None:
            ahead.close()


class _DeviceSpeech(_ThreadedSpeech):
    """The energy detector declaring a GPU: runs batched on the engine's thread."""

    device = "cuda:0"

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def batch(self, audios, sample_rate):
        self.batches.append(len(audios))
        return [self(a, sample_rate) for a in audios]


def test_a_device_detector_takes_the_blocks_of_many_rows_in_one_call(tmp_path):
    import threading

    rows = []
    for i in range(12):
        path = tmp_path / f"r{i}.wav"
        sf.write(path, burst_audio([(0.3, 1.0), (1.5, 2.2 + 0.1 * i)], 4.0, seed=i), SR,
                 subtype="FLOAT")
        rows.append(ManifestRow(f"r{i}", str(path), source=str(path)))
    outs = {}
    threaded, device = _ThreadedSpeech(), _DeviceSpeech()
    for detector in (threaded, device):
        engine = ScriptedEngine(lambda req, k: _is_repair(req) or k != 1)
        options = TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                                    coverage=CoverageCheck(detector))
        got = [out for out, _ in Transcriber(engine, options).run(iter(rows))]
        outs[type(detector)] = [(o.id, o.text, o.words, o.coverage) for o in got]
        assert [o.text for o in got] == ["w0 w1"] * 12  # every skipped word repaired
    assert outs[_ThreadedSpeech] == outs[_DeviceSpeech]
    # Every row's block was waiting when the first window's speech was asked for: one call,
    # on the engine's (this) thread.
    assert device.batches == [12]
    assert {name for name, _ in device.calls} == {threading.current_thread().name}


def test_a_long_row_s_outcome_is_the_same_with_the_detector_ahead_or_on_the_thread(tmp_path):
    bursts = [(0.5, 2.0), (4.0, 5.5), (9.2, 10.6), (13.0, 14.5), (19.0, 20.5), (23.0, 24.0)]
    row = _row(tmp_path, bursts, 26.0)
    outs = []
    on_thread = _ThreadedSpeech()
    on_thread.device = ""  # a detector that does not say where it computes: batched here
    for detector in (on_thread, _ThreadedSpeech()):
        engine = ScriptedEngine(lambda req, k: _is_repair(req) or k != 3)
        options = TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                                    coverage=CoverageCheck(detector))
        outs.append(_run(Transcriber(engine, options), row))
    assert outs[0].text == outs[1].text and outs[0].words == outs[1].words
    assert outs[0].coverage == outs[1].coverage == 1.0
    assert "w3" in outs[0].text.split()  # the skipped word came back through the repair
    # Blocks of the engine's 10-s window on a fixed grid, each detected once, off the thread.
    assert [n for _, n in detector.calls] == [10 * SR, 10 * SR, 6 * SR]
    assert all(name.startswith("oasr-coverage") for name, _ in detector.calls)
    assert [n for _, n in on_thread.calls] == [10 * SR, 10 * SR, 6 * SR]
    assert not any(name.startswith("oasr-coverage") for name, _ in on_thread.calls)
