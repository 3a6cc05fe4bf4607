"""The skip guard (oasr.transcribe.skip_guard): a Whisper segment whose words the aligner had to
stretch over seconds of speech is a jump; the runner decodes that window again over a shorter
span, or resumes where a later segment's jump began, so no utterance is passed over."""

from __future__ import annotations

import soundfile as sf

from oasr.engine.request import DecodingOptions, Request, RequestOutput, WordTiming
from oasr.io import ManifestRow
from oasr.transcribe.coverage import CoverageCheck, EnergySpeech
from oasr.transcribe.runner import TranscribeOptions, Transcriber
from oasr.transcribe.skip_guard import SKIP_SCORE, Skip, cut_before, first_skip, segment_score
from oasr.transcribe.vad_segments import VadTranscriber
from tests.transcribe.scripted_engine import (
    SR,
    FixedSegmenter,
    ScriptedEngine,
    burst_audio,
    find_bursts,
)


def _out(segments: list[tuple[float, float, list[tuple[str, float, float]]]]) -> RequestOutput:
    words = [WordTiming(w, a, b, 0.9) for _, _, ws in segments for w, a, b in ws]
    segs = [(a, b, " ".join(w for w, _, _ in ws)) for a, b, ws in segments]
    return RequestOutput("r", text=" ".join(t for _, _, t in segs), token_ids=[1, 2, 3],
                         words=words, segments=segs, settled_token_ids=[1, 2, 3])


HONEST = (0.0, 2.0, [("He", 0.0, 0.3), ("asked", 0.3, 0.8), ("himself,", 0.8, 2.0)])
# One segment over 25 s: four words spread over speech the decoder never transcribed.
JUMP = (2.5, 27.5, [("Now,", 2.5, 7.5), ("leave", 7.6, 9.0), ("and", 9.5, 12.1),
                    ("take", 12.2, 14.3), ("your", 14.4, 19.4), ("half.", 20.0, 21.0)])


def test_a_segment_of_stretched_words_scores_a_skip_and_an_honest_one_does_not():
    honest = [WordTiming(w, a, b, 0.9) for w, a, b in HONEST[2]]
    assert segment_score(honest) == 0.0
    # a single slow word before a pause is not a skip
    assert segment_score([WordTiming("Well...", 0.0, 3.5, 0.9)]) < SKIP_SCORE
    assert segment_score([WordTiming(w, a, b, 0.9) for w, a, b in JUMP[2]]) >= SKIP_SCORE
    assert first_skip(_out([HONEST])) is None
    assert first_skip(_out([HONEST, JUMP])) == Skip(segment=1, words=3)
    assert first_skip(_out([JUMP, HONEST])) == Skip(segment=0, words=0)


def test_cut_before_keeps_the_segments_before_the_skip_and_resumes_at_it():
    jumped = _out([HONEST, JUMP])
    out = cut_before(jumped, first_skip(jumped))
    assert out.text == "He asked himself,"
    assert [w.word for w in out.words] == ["He", "asked", "himself,"]
    assert out.segments == [(0.0, 2.0, "He asked himself,")]
    assert out.resume_at == 2.5 and out.settled_token_ids == []
    assert cut_before(jumped, first_skip(jumped), resume=False).resume_at is None


BURSTS = [(0.5, 1.7), (2.5, 3.7), (4.5, 5.7), (6.5, 7.7), (11.0, 12.2), (14.0, 15.2)]


class TimestampEngine(ScriptedEngine):
    """The scripted engine in timestamp mode: a segment per whole burst, resuming at a burst
    the window cuts; the first request (window 0) jumps: one segment from its start to the
    last whole burst, holding "and" and that burst's word stretched over all of it."""

    def __init__(self, jumping_windows: tuple[int, ...] = (0,), window_s: float = 10.0) -> None:
        super().__init__(lambda req, k: True, window_s=window_s)
        self.jumping_windows = jumping_windows

    @staticmethod
    def _validate(options: DecodingOptions) -> None:
        if options.prompt:
            raise ValueError("no prompt")

    def decode(self, request: Request) -> RequestOutput:
        if not request.decoding.timestamps:
            return super().decode(request)
        bursts = find_bursts(request.audio)
        # a burst the window starts on is whole (the window resumed before its onset)
        seconds = len(request.audio) / SR
        whole = [(k, a, b) for k, a, b, w in bursts if w or (a == 0 and b < seconds)]
        cut = [a for _, a, b, w in bursts if not w and a > 0]
        if request.metadata.get("window") in self.jumping_windows and len(whole) > 1:
            k, _, end = whole[-1]
            words = [WordTiming("and", 0.0, end / 2, 0.9), WordTiming(f"w{k}", end / 2, end, 0.9)]
            segs = [(0.0, end, " ".join(w.word for w in words))]
        else:
            words = [WordTiming(f"w{k}", a, b, 0.9) for k, a, b in whole]
            segs = [(a, b, f"w{k}") for k, a, b in whole]
        return RequestOutput(request.request_id, text=" ".join(t for _, _, t in segs),
                             token_ids=list(range(len(words))), finish_reason="stop",
                             words=words, segments=segs, resume_at=cut[0] if cut else None,
                             settled_token_ids=[], avg_logprob=-0.2, no_speech_prob=0.01,
                             metadata=request.metadata)


def test_a_window_whose_first_segment_jumps_is_decoded_again_over_half_the_window(tmp_path):
    bursts = BURSTS
    path = tmp_path / "rec.wav"
    sf.write(path, burst_audio(bursts, 18.0), SR, subtype="FLOAT")
    engine = TimestampEngine()
    options = TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                                coverage=CoverageCheck(EnergySpeech()))
    [(out, _)] = list(Transcriber(engine, options).run(iter([ManifestRow(
        "rec", str(path), source=str(path))])))
    assert out.text.split() == ["w0", "w1", "w2", "w3", "w4", "w5"]
    first, again = engine.requests[:2]
    assert len(first.audio) == 10 * SR and first.metadata["window"] == 0
    # the same start, half the window
    assert len(again.audio) == 5 * SR and again.metadata["window"] == 1
    assert all(w["end"] - w["start"] < 1.3 for w in out.words)
    assert out.coverage == 1.0


def test_a_narrowed_window_that_jumps_again_is_settled_and_left_to_the_coverage_repair(
        tmp_path):
    # A 20-s window, so the narrowed one (10 s) is long enough for its jump to score a skip.
    bursts = BURSTS + [(18.0, 19.2), (22.0, 23.2), (26.0, 27.2)]
    path = tmp_path / "rec.wav"
    sf.write(path, burst_audio(bursts, 30.0), SR, subtype="FLOAT")
    engine = TimestampEngine(jumping_windows=(0, 1), window_s=20.0)
    options = TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                                coverage=CoverageCheck(EnergySpeech()))
    [(out, _)] = list(Transcriber(engine, options).run(iter([ManifestRow(
        "rec", str(path), source=str(path))])))
    windows = [r for r in engine.requests if "repair" not in r.metadata]
    assert [len(r.audio) / SR for r in windows[:2]] == [20.0, 10.0]
    # The narrowed window is settled whole, nothing of its jump kept: the next window starts
    # where it ended, and the speech it skipped comes back through the repair.
    assert windows[2].metadata["window"] == 2
    assert any("repair" in r.metadata for r in engine.requests)
    heard = out.text.split()
    assert "and" not in heard
    assert heard == [f"w{k}" for k in range(len(bursts))]
    assert out.coverage == 1.0


def test_without_the_guard_the_jump_stands(tmp_path, monkeypatch):
    """What the guard prevents: the stretched words pass for coverage of w0 and w2, which
    are lost."""
    import oasr.transcribe.runner as runner

    monkeypatch.setattr(runner, "first_skip", lambda out: None)
    bursts = BURSTS
    path = tmp_path / "rec.wav"
    sf.write(path, burst_audio(bursts, 18.0), SR, subtype="FLOAT")
    options = TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                                coverage=CoverageCheck(EnergySpeech()))
    [(out, _)] = list(Transcriber(TimestampEngine(), options).run(iter([ManifestRow(
        "rec", str(path), source=str(path))])))
    heard = out.text.split()
    assert heard[0] == "and" and "w0" not in heard and "w2" not in heard


def _vad_run(tmp_path, engine):
    path = tmp_path / "rec.wav"
    sf.write(path, burst_audio(BURSTS, 18.0), SR, subtype="FLOAT")
    options = TranscribeOptions(inputs=[], word_timestamps=True, decode_workers=0,
                                coverage=CoverageCheck(EnergySpeech()))
    segmenter = FixedSegmenter([(0.0, 9.0), (9.0, 18.0)], list(BURSTS))
    [(out, _)] = list(VadTranscriber(engine, options, segmenter).run(iter([ManifestRow(
        "rec", str(path), source=str(path))])))
    return out


def test_a_vad_chunk_that_jumps_leaves_its_speech_to_the_coverage_repair(tmp_path):
    engine = TimestampEngine()
    out = _vad_run(tmp_path, engine)
    assert out.text.split() == ["w0", "w1", "w2", "w3", "w4", "w5"]
    chunks = [r for r in engine.requests if "repair" not in r.metadata]
    repairs = [r for r in engine.requests if "repair" in r.metadata]
    assert len(chunks) == 2 and repairs and all(not r.decoding.timestamps for r in repairs)
    assert out.coverage == 1.0


def test_a_vad_chunk_that_jumps_without_the_guard_keeps_the_stretched_words(tmp_path,
                                                                              monkeypatch):
    import oasr.transcribe.vad_segments as vad_segments

    monkeypatch.setattr(vad_segments, "first_skip", lambda out: None)
    heard = _vad_run(tmp_path, TimestampEngine()).text.split()
    assert "and" in heard
