"""The stream API and the re-decode policy over a scripted engine (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.streaming import EndpointConfig, EndpointRule, StreamingRecognizer, StreamOptions
from tests.streaming.scripted_engine import SR, ScriptedEngine, scripted_audio
from tests.vad.test_stream import count_detector_calls


def _script(n_words: int, start: float, pause_every: int = 0, pause: float = 1.6):
    """Words of 0.3 s with 0.15 s gaps; a longer pause after every ``pause_every`` words."""
    out, t = [], start
    for i in range(n_words):
        out.append((f"w{i}" + ("." if pause_every and (i + 1) % pause_every == 0 else ""),
                    t, t + 0.3))
        t += 0.45
        if pause_every and (i + 1) % pause_every == 0:
            t += pause
    return out, t + 1.0


def _run(rec, streams_audio, chunk, on_result=None, streams_out=None):
    """Feed every stream chunk by chunk, decoding all ready streams together; -> finals.
    ``streams_out``: a list that receives the streams (their stats)."""
    streams = [rec.create_stream() for _ in streams_audio]
    if streams_out is not None:
        streams_out += streams
    finals = [[] for _ in streams]
    longest = max(len(a) for a in streams_audio)

    def drain():
        while any(rec.is_ready(s) for s in streams):
            rec.decode_streams(streams)
            for k, s in enumerate(streams):
                if on_result is not None:
                    on_result(k, rec.get_result(s))
                if rec.is_endpoint(s):
                    finals[k].append(rec.get_result(s))
                    rec.reset(s)

    for i in range(0, longest, chunk):
        for s, a in zip(streams, streams_audio):
            if i < len(a):
                s.accept_waveform(SR, a[i:i + chunk])
        drain()
    for s in streams:
        s.input_finished()
    drain()
    assert all(rec.is_done(s) for s in streams)
    return finals


def test_finals_carry_every_word_once_with_clock_times() -> None:
    script, secs = _script(24, 0.5, pause_every=8)
    audio = scripted_audio(script, secs)
    engine = ScriptedEngine(audio, script)
    rec = StreamingRecognizer(engine, StreamOptions(step_s=0.5, max_step_s=0.5))
    finals = _run(rec, [audio], 1234)[0]
    words = [w for f in finals for w in f.words]
    assert [w.text for w in words] == [t for t, _, _ in script]
    for w, (_, a, b) in zip(words, script):
        assert w.start == pytest.approx(a, abs=1e-6) and w.end == pytest.approx(b, abs=1e-6)
    # The 1.6 s pauses end utterances by rule 2 (1.2 s of silence after speech).
    assert [f.endpoint_rule for f in finals[:3]] == [2, 2, 2]
    assert [len(f.words) for f in finals[:3]] == [8, 8, 8]
    assert all(f.is_final and f.start < f.end for f in finals)


def test_committed_text_is_never_rewritten_and_partial_is_the_tail() -> None:
    script, secs = _script(30, 0.3)  # no pause: rule 3 and trimming do the cutting
    audio = scripted_audio(script, secs, seed=1)
    engine = ScriptedEngine(audio, script)
    options = StreamOptions(step_s=0.5, max_step_s=0.5, trim_s=4.0, max_buffer_s=6.0,
                            endpoint=EndpointConfig(rule3=EndpointRule(False, 0.0, 8.0)))
    rec = StreamingRecognizer(engine, options)
    seen: dict[int, str] = {}
    partials = []

    def check(k, r):
        before = seen.get(r.segment, "")
        assert r.committed.startswith(before)  # committed text only grows
        seen[r.segment] = r.committed
        if not r.is_final:
            partials.append(r.partial)
            assert r.text == " ".join(t for t in (r.committed, r.partial) if t)

    finals = _run(rec, [audio], 800, on_result=check)[0]
    assert " ".join(f.committed for f in finals).split() == [t for t, _, _ in script]
    assert any(p.endswith("-") for p in partials)  # a cut word shows in the partial only
    assert any(f.endpoint_rule == 3 for f in finals)
    assert engine.max_request_s <= 6.0 + 0.5 + 1e-6  # the buffer was trimmed


def test_ready_streams_decode_in_one_engine_pass() -> None:
    script, secs = _script(10, 0.4)
    audio = scripted_audio(script, secs, seed=2)
    engine = ScriptedEngine(audio, script)
    rec = StreamingRecognizer(engine, StreamOptions(step_s=1.0, max_step_s=1.0))
    finals = _run(rec, [audio, audio.copy(), audio.copy()], 16000)
    for f in finals:
        assert " ".join(x.committed for x in f).split() == [t for t, _, _ in script]
    assert max(engine.passes) == 3 and engine.passes.count(3) >= len(engine.passes) - 2


def test_silence_is_not_decoded_and_ends_by_rule_1() -> None:
    audio = scripted_audio([], 6.0, seed=3)
    engine = ScriptedEngine(audio, [])
    rec = StreamingRecognizer(engine, StreamOptions())
    finals = _run(rec, [audio], 4000)[0]
    assert engine.passes == []
    assert [f.endpoint_rule for f in finals[:2]] == [1, 1] and not any(f.words for f in finals)


def test_any_rate_and_chunk_size_lands_on_the_model_clock() -> None:
    from oasr.audio.resample import resample

    script, secs = _script(12, 0.5, pause_every=6)
    audio16 = scripted_audio(script, secs, seed=4)
    audio48 = resample(audio16, SR, 48000)
    engine = ScriptedEngine(resample(audio48, 48000, SR), script)
    rec = StreamingRecognizer(engine, StreamOptions(step_s=0.5, max_step_s=0.5))
    s = rec.create_stream()
    rng = np.random.default_rng(0)
    i = 0
    while i < len(audio48):
        n = int(rng.choice([0, 1, 37, 4800, 20000]))
        s.accept_waveform(48000, audio48[i:i + n])
        i += n
    s.input_finished()
    assert abs(s.received - len(audio16)) <= 1


def test_refuses_chunkwise_models_without_a_streaming_head_and_input_after_finish() -> None:
    script, secs = _script(2, 0.2)
    engine = ScriptedEngine(scripted_audio(script, secs), script)
    engine.model.encoder.streaming_kind = "paged"
    with pytest.raises(ValueError, match="chunk-wise but decode family None has no streaming head"):
        StreamingRecognizer(engine)
    engine.model.encoder.streaming_kind = "none"
    rec = StreamingRecognizer(engine)
    s = rec.create_stream()
    s.input_finished()
    with pytest.raises(ValueError, match="input_finished"):
        s.accept_waveform(SR, np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="window"):
        StreamingRecognizer(engine, StreamOptions(max_buffer_s=28.0, max_step_s=5.0))


def test_the_detector_reads_every_stream_in_one_call() -> None:
    """Three streams fed in different pieces: one energy-detector call per detector pass for
    all of them, and each stream's trace, endpoints and finals equal to it streamed alone."""
    script, secs = _script(16, 0.5, pause_every=4)
    audio = scripted_audio(script, secs, seed=5)
    options = StreamOptions(step_s=0.5, max_step_s=0.5)
    rec = StreamingRecognizer(ScriptedEngine(audio, script), options)
    calls = count_detector_calls(rec.detectors.get("energy"))
    together = _run(rec, [audio, audio.copy(), audio.copy()], 7000)
    assert max(calls) == 3 and calls.count(3) >= len(calls) - 2
    alone = _run(StreamingRecognizer(ScriptedEngine(audio, script), options), [audio], 7000)[0]
    for finals in together:
        assert [(f.committed, f.start, f.end, f.endpoint_rule) for f in finals] == [
            (f.committed, f.start, f.end, f.endpoint_rule) for f in alone]
        assert [f.endpoint_rule for f in finals[:3]] == [2, 2, 2]


def test_policy_is_chosen_once_and_owns_the_stream_state() -> None:
    from oasr.streaming.redecode import RedecodePolicy, RedecodeState

    script, secs = _script(2, 0.2)
    rec = StreamingRecognizer(ScriptedEngine(scripted_audio(script, secs), script))
    assert isinstance(rec.policy, RedecodePolicy) and rec.policy.kind == "re-decode"
    s = rec.create_stream()
    assert isinstance(s.state, RedecodeState)
    rec.close(s)
    assert s.state is None and s.id not in rec.detectors.get("energy").states


def test_unknown_and_non_streaming_detectors_are_refused_by_name() -> None:
    script, secs = _script(2, 0.2)
    engine = ScriptedEngine(scripted_audio(script, secs), script)
    with pytest.raises(ValueError, match="unknown speech detector 'webrtc'; stream with one of: "
                                         "energy, silero"):
        StreamingRecognizer(engine, StreamOptions(detector="webrtc"))
    with pytest.raises(ValueError, match="'fsmn' has no streaming mode"):
        StreamingRecognizer(engine, StreamOptions(detector="fsmn"))


def test_finals_measure_the_detected_speech_their_words_cover() -> None:
    script, secs = _script(16, 0.5, pause_every=8, pause=4.0)
    audio = scripted_audio(script, secs)
    streams = []
    finals = _run(StreamingRecognizer(ScriptedEngine(audio, script),
                                      StreamOptions(step_s=0.5, max_step_s=0.5)),
                  [audio], 1600, streams_out=streams)[0]
    s = streams[0]
    assert [f.coverage for f in finals if f.words] and all(
        f.coverage == 1.0 for f in finals if f.words)
    assert s.stats.coverage == 1.0 and s.stats.speech_s > 0 and not s.stats.uncovered

    # Speech in the first long pause that the engine hears nothing in: measured, reported.
    end = script[7][2]
    ghost = ("ghost", end + 1.4, end + 2.6)
    audio = scripted_audio(script + [ghost], secs)
    streams = []
    finals = _run(StreamingRecognizer(ScriptedEngine(audio, script),
                                      StreamOptions(step_s=0.5, max_step_s=0.5)),
                  [audio], 1600, streams_out=streams)[0]
    s = streams[0]
    assert [w.text for f in finals for w in f.words] == [t for t, _, _ in script]
    assert s.stats.coverage < 1.0
    (a, b), = s.stats.uncovered
    assert a == pytest.approx(ghost[1], abs=0.1) and b == pytest.approx(ghost[2], abs=0.1)
    assert any(f.coverage is not None and f.coverage < 1.0 for f in finals)
