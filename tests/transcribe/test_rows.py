"""A row's ``language_probability``: what the model measured of the row's language, from the
pieces that detected one; None when no piece did (the language given, an English-only model)."""

from __future__ import annotations

import json

import pytest

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request, RequestOutput
from oasr.io import ManifestRow, OutputWriter
from oasr.transcribe.rows import assemble_row
from oasr.transcribe.runner import TranscribeOptions, Transcriber
from tests.helpers.tiny_whisper import build_tiny_whisper, random_audio
from tests.transcribe.conftest import write_wav


def _out(language, probs=None, tokens=(5,)):
    return RequestOutput("r", text="x", token_ids=list(tokens), language=language,
                         language_probability=dict(probs or {}).get(language),
                         all_language_probs=list((probs or {}).items()) or None)


def test_the_rows_language_probability_is_its_mean_over_the_detecting_pieces():
    row = ManifestRow("a", "a.wav")
    outs = [_out("en", {"en": 0.9, "de": 0.1}), _out("de", {"de": 0.6, "en": 0.4}),
            _out("en", {"en": 0.7, "de": 0.3}), _out("en")]
    got = assemble_row(row, outs, duration=3.0, texts=["x"] * 4, segments=None, words=None)
    # The row's language is the one most pieces report; its probability in each piece that
    # measured one (the piece that detected German too).
    assert got.language == "en"
    assert got.language_probability == pytest.approx((0.9 + 0.4 + 0.7) / 3)
    given = assemble_row(row, [_out("en")], duration=1.0, texts=["x"], segments=None,
                         words=None)
    assert given.language_probability is None


def test_the_detected_probability_reaches_the_output_column(tmp_path):
    tw = build_tiny_whisper(multilingual=True, with_hf=False)
    engine = ASREngine(EngineConfig(device="cpu", max_new_tokens=4), loaded=tw.loaded)
    audio = random_audio(3)
    path = write_wav(tmp_path / "a.wav", audio, subtype="FLOAT")
    (direct,) = engine.run([Request("r", audio, DecodingOptions(max_new_tokens=4))])
    assert direct.language_probability is not None
    options = TranscribeOptions(inputs=[], max_new_tokens=4, decode_workers=0)
    rows = [out for out, _ in Transcriber(engine, options).run(iter([ManifestRow("a", str(path))]))]
    (row,) = rows
    assert row.language == direct.language
    assert row.language_probability == pytest.approx(direct.language_probability)
    out = tmp_path / "o.jsonl"
    with OutputWriter(out, "jsonl", {}) as writer:
        writer.write(row)
    written = json.loads(out.read_text().splitlines()[0])
    assert written["language_probability"] == pytest.approx(direct.language_probability)
