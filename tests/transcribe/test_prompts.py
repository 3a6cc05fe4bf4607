"""Whisper's prompt in the runner: the initial prompt, the ``prompt`` column and the
previous-text conditioning of a long recording's windows (reset above temperature 0.5)."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from oasr.io import ManifestRow
from oasr.transcribe.fallback import TemperatureFallback
from oasr.transcribe.runner import TranscribeOptions, Transcriber
from tests.transcribe.conftest import build_tiny_engine, clip

CLIPS = ("1688-142285-0002", "1688-142285-0003", "1688-142285-0004")


def _long(tmp_path) -> str:
    pieces = [sf.read(clip(c), dtype="float32")[0] for c in CLIPS]
    path = tmp_path / "long.wav"
    sf.write(path, np.concatenate(pieces), 16000)
    return str(path)


def _run(rows, **options):
    """(output rows, [(request id, temperature, prompt)] in submission order, each window's
    settled token ids, the tokenizer)."""
    engine = build_tiny_engine(window_s=6.0)
    seen: list[tuple[str, float, str | None]] = []
    add = engine.add_request

    def spy(request):
        seen.append((request.request_id, request.decoding.temperature, request.decoding.prompt))
        return add(request)

    engine.add_request = spy
    kept: dict[str, list[int]] = {}
    run = engine.run

    def tap(requests, **kw):
        for out in run(requests, **kw):
            kept[out.request_id] = (out.settled_token_ids if out.settled_token_ids is not None
                                    else out.token_ids)
            yield out

    engine.run = tap
    outs = [o for o, _ in Transcriber(engine, TranscribeOptions(inputs=[], **options))
            .run(iter(rows))]
    return outs, seen, kept, engine.tokenizer


def test_each_window_is_prompted_with_the_tokens_settled_before_it(tmp_path):
    outs, seen, kept, tok = _run([ManifestRow("L", _long(tmp_path))], initial_prompt=" Quilter ",
                                 condition_on_previous_text=True)
    assert len(seen) >= 3 and outs[0].error is None
    # Whisper's all_tokens: the initial prompt's tokens, then each window's settled tokens
    # (timestamps included).
    context = list(tok.encode(" Quilter"))
    for request_id, _, prompt in seen:
        assert prompt == context, request_id
        context = context + kept[request_id]
    assert any(t >= tok.timestamp_begin for t in context)


def test_whisper_conditions_by_default(tmp_path):
    _, seen, kept, tok = _run([ManifestRow("L", _long(tmp_path))], initial_prompt="Quilter")
    context = list(tok.encode(" Quilter"))
    assert len(seen) >= 3 and [p for _, _, p in seen][:1] == [context]
    for request_id, _, prompt in seen:
        assert prompt == context, request_id
        context = context + kept[request_id]


def test_without_conditioning_only_the_first_window_is_prompted(tmp_path):
    _, seen, _, _ = _run([ManifestRow("L", _long(tmp_path))], initial_prompt="Quilter",
                         condition_on_previous_text=False)
    assert [p for _, _, p in seen] == ["Quilter"] + [None] * (len(seen) - 1)


def test_a_window_that_repeats_itself_resets_the_prompt(tmp_path, monkeypatch):
    import oasr.transcribe.runner as runner

    calls = []

    def first_window_repeats(token_ids, finish_reason):
        calls.append(len(calls))
        return len(calls) == 1

    monkeypatch.setattr(runner, "is_repetition", first_window_repeats)
    _, seen, kept, tok = _run([ManifestRow("L", _long(tmp_path))], initial_prompt="Quilter")
    first = list(tok.encode(" Quilter"))
    assert len(seen) >= 3 and seen[0][2] == first
    # The repeating first window is not carried: the second starts from an empty prompt
    # (None), the third from the second's tokens.
    assert seen[1][2] is None
    assert seen[2][2] == kept[seen[1][0]]


def test_a_window_kept_above_temperature_half_resets_the_prompt(tmp_path):
    # Every window fails at 0.0 (threshold above any log-probability) and stands at 0.6.
    fallback = TemperatureFallback((0.0, 0.6), logprob_threshold=100.0)
    _, seen, _, tok = _run([ManifestRow("L", _long(tmp_path))], initial_prompt="Quilter",
                           condition_on_previous_text=True, fallback=fallback)
    # The first window goes twice with the initial prompt (its retry included); every later
    # window starts from an empty prompt, the text kept at 0.6 having reset it.
    first = list(tok.encode(" Quilter"))
    assert seen[0][1:] == (0.0, first) and seen[1][1:] == (0.6, first)
    assert all(p is None for _, _, p in seen[2:]) and len(seen) > 2


def test_a_prompt_column_wins_over_the_initial_prompt(tmp_path):
    rows = [ManifestRow("a", str(clip(CLIPS[0])), prompt="Mr. Thornton"),
            ManifestRow("b", str(clip(CLIPS[1])))]
    outs, seen, _, tok = _run(rows, initial_prompt="Helstone")
    assert {r.split("\x1f")[0]: p for r, _, p in seen} == {
        "a": list(tok.encode(" Mr. Thornton")), "b": list(tok.encode(" Helstone"))}
    assert all(o.error is None and o.text for o in outs)
