"""The search options from the run options to each window's request: the prefix on a
recording's first window only, the rest on every window; hotwords reaching a CTC family's
boosting trie; an option the model's family cannot serve refused before any row, naming it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from oasr.api import Model
from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from oasr.transcribe import session as session_module
from oasr.transcribe.options import OptionsError, RunOptions
from oasr.transcribe.session import TranscriptionSession
from tests.helpers.fake_ctc import PIECES, CharTokenizer, build_fake_ctc, speechy_audio
from tests.transcribe.conftest import SAMPLE_RATE, clip, write_tiny_bundle, write_wav


class Spelling(CharTokenizer):
    """The fake CTC model's characters, spelled back (hotwords are encoded by the tokenizer)."""

    def encode(self, text: str) -> list[int]:
        return [PIECES.index(c) for c in text]


@pytest.fixture
def ctc_session(monkeypatch):
    """A session over the fake CTC model (prefix beam search, beam 10)."""
    loaded = replace(build_fake_ctc(0), tokenizer=Spelling())

    def build(options: RunOptions) -> ASREngine:
        return ASREngine(EngineConfig(device="cpu", decode_method="ctc",
                                      decode_options=options.decode.family_options()),
                         loaded=loaded)

    monkeypatch.setattr(session_module, "build_engine", build)

    def make(**flat) -> TranscriptionSession:
        return TranscriptionSession(RunOptions.from_flat(device="cpu", **flat))

    return make


def test_hotwords_reach_the_ctc_boosting_search(tmp_path, ctc_session):
    audio = speechy_audio(0, (0.8, 0.9))
    path = write_wav(tmp_path / "a.wav", audio, subtype="FLOAT")
    model = Model(ctc_session(hotwords="cd", hotwords_score=4.0))
    boosted = model.transcript(path).text
    plain = model.transcript(path, hotwords=None, hotwords_score=None).text
    engine = model.engine
    (direct,) = engine.run([Request("r", audio, DecodingOptions(hotwords="cd",
                                                                  hotwords_score=4.0))])
    assert boosted == direct.text and boosted != plain
    assert boosted.count("cd") > plain.count("cd")


def test_options_a_family_cannot_serve_are_refused_naming_them(ctc_session):
    with pytest.raises(OptionsError) as prefix:
        ctc_session(prefix="ab")
    assert prefix.value.for_cli().startswith("--prefix: decode family 'ctc' cannot act on")
    with pytest.raises(OptionsError) as greedy:
        ctc_session(hotwords="ab", decode_options={"beam_size": 1})
    assert greedy.value.option == "hotwords" and "beam_size" in greedy.value.text
    model = Model(ctc_session())
    with pytest.raises(OptionsError, match="^no_repeat_ngram_size: decode family 'ctc'"):
        model.transcribe(np.zeros(8000, np.float32), sample_rate=16000,
                         no_repeat_ngram_size=2)


def test_a_refusal_on_the_command_line_is_one_line_naming_the_flag(tmp_path):
    from oasr.cli.app import app

    bundle = write_tiny_bundle(tmp_path / "tiny")
    result = CliRunner().invoke(app, [
        "transcribe", str(clip("1688-142285-0002")), "-o", str(tmp_path / "o.jsonl"),
        "--model", str(bundle), "--device", "cpu", "--no-progress", "--hotwords", "Helstone",
        "--hotwords-score", "2"])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: --hotwords-score: Whisper's hotwords are a prompt")
    result = CliRunner().invoke(app, [
        "transcribe", str(clip("1688-142285-0002")), "-o", str(tmp_path / "o.jsonl"),
        "--suppress-tokens", "-1,x"])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --suppress-tokens '-1,x': expected token ids, "
                                     "comma-separated (-1: the checkpoint's list; empty: "
                                     "suppress nothing)")


@pytest.fixture(scope="module")
def long_recording(tmp_path_factory):
    import soundfile as sf

    pieces = [sf.read(clip(c), dtype="float32")[0]
              for c in ("1688-142285-0002", "1688-142285-0003", "1688-142285-0004")]
    return write_wav(tmp_path_factory.mktemp("long") / "long.wav", np.concatenate(pieces),
                     subtype="FLOAT")


def test_the_prefix_opens_the_first_window_only(tmp_path, monkeypatch, long_recording):
    import oasr

    model = oasr.load(str(write_tiny_bundle(tmp_path / "tiny", window_s=6.0)), device="cpu",
                      language_check=False, prefix="Well", hotwords="Helstone",
                      repetition_penalty=1.2, suppress_blank=False)
    submitted: list[Request] = []
    add = model.engine.add_request
    monkeypatch.setattr(model.engine, "add_request", lambda r: (submitted.append(r), add(r))[1])
    out = model.transcript(long_recording)
    assert len(submitted) > 1 and out.text.startswith("Well")
    assert [r.decoding.prefix for r in submitted] == ["Well"] + [None] * (len(submitted) - 1)
    assert all(r.decoding.hotwords == "Helstone" and r.decoding.repetition_penalty == 1.2
               and not r.decoding.suppress_blank for r in submitted)
    assert len(np.asarray(submitted[0].audio)) <= 6.0 * SAMPLE_RATE
