"""faster-whisper's search options through the API and the CLI on the real Whisper tiny.en and
real speech, each group against transformers' ``generate`` with the same option where it has
one: the repetition rules, suppression, the prefix and the hotwords prompt, beam search; and
against the engine's own request (whose option is pinned to its reference in
``tests/engine/decode``) where transformers has none (``patience``, ``best_of``)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import oasr
from oasr.audio import load_audio
from oasr.engine.request import DecodingOptions, Request
from oasr.transcribe.options import DecodeOptions, FallbackOptions
from tests.helpers.data import SHARED_DATA
from tests.helpers.real_tiny_en import require_tiny_en_and_speech
from tests.helpers.tiny_whisper import torch_threads
from tests.helpers.whisper_generate import hf_generate

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
# "The best amount of aesthetic is that which is at hand." (tiny.en, greedy): repeats " is".
REPEATS = AUDIO / "1998-15444-0007.flac"
# "... accusing people of being shopy at Halston." (the book's "Helstone").
NAME = AUDIO / "1688-142285-0005.flac"
MAX_NEW = 48
EOT = 50256  # tiny.en's end of text: ids from it up are special or timestamps

require_tiny_en_and_speech(AUDIO)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def model() -> oasr.api.Model:
    return oasr.load(device="cpu", language_check=False, word_timestamps=False)


def _tokens(model, path, **options) -> list[int]:
    """The transcript's text tokens (the API's, timestamps and specials dropped)."""
    out = model.transcript(path, max_new_tokens=MAX_NEW, **options)
    return [t for t in out.token_ids if t < EOT]


def _oracle(model, path, **kwargs) -> list[int]:
    return hf_generate(model.engine.loaded, load_audio(path), MAX_NEW, **kwargs)


@pytest.fixture(scope="module")
def plain(model) -> list[int]:
    tokens = _tokens(model, REPEATS)
    assert tokens == _oracle(model, REPEATS)
    return tokens


def test_repetition_rules_decode_as_transformers(model, plain):
    for name, value in (("repetition_penalty", 1.5), ("no_repeat_ngram_size", 1)):
        got = _tokens(model, REPEATS, **{name: value})
        assert got == _oracle(model, REPEATS, **{name: value}), name
        assert got != plain, name


def test_suppressed_tokens_decode_as_transformers(model, plain):
    cfg = model.engine.loaded.model.config
    banned = plain[-3]  # a word of the greedy transcript
    got = _tokens(model, REPEATS, suppress_tokens=[-1, banned])
    assert got == _oracle(model, REPEATS, suppress_tokens=[*cfg.suppress_tokens, banned])
    assert banned not in got and got != plain


def test_prefix_and_hotwords_prompt_as_transformers(model):
    cfg, tok = model.engine.loaded.model.config, model.engine.loaded.tokenizer
    prefix = "The best amount of"
    ids = tok.encode(" " + prefix)
    got = _tokens(model, REPEATS, prefix=prefix)
    forced = torch.tensor([[*cfg.sot_sequence, *ids]])
    assert got == ids + _oracle(model, REPEATS, decoder_input_ids=forced)
    hot = _tokens(model, NAME, hotwords="Helstone")
    assert hot == _oracle(model, NAME, prompt_ids=torch.tensor(
        [tok.sot_prev, *tok.encode(" Helstone")]))
    assert "Helstone" in tok.decode(hot) and "Helstone" not in tok.decode(_tokens(model, NAME))


def test_beam_search_options_reach_the_search(model, plain):
    beam = _tokens(model, REPEATS, beam_size=2)
    assert beam == _oracle(model, REPEATS, num_beams=2) and beam != plain
    # transformers has no patience: the engine's request (openai-whisper's BeamSearchDecoder,
    # re-derived in tests/engine/decode/test_aed_search_options.py) is the reference.
    patient = _tokens(model, REPEATS, beam_size=2, patience=3.0)
    assert patient != beam  # six finished hypotheses: the greedy reading ranks first
    ranked = _tokens(model, REPEATS, beam_size=2, patience=3.0, length_penalty=0.5)
    assert ranked != patient  # a weaker length normalisation: the shorter reading again
    engine = model.session.engine_for(DecodeOptions(beam_size=2))
    (direct,) = engine.run([Request("r", load_audio(REPEATS), DecodingOptions(
        patience=3.0, length_penalty=0.5, max_new_tokens=MAX_NEW))])
    assert ranked == [t for t in direct.token_ids if t < EOT]


def test_best_of_keeps_the_best_sampled_candidate_as_the_engine(model):
    fallback = FallbackOptions(temperature=(1.0,), seed=1).build()
    seed = fallback.window_seed("0", 0, 0)  # the API's first row, first window, first try
    got = {n: _tokens(model, REPEATS, temperature=1.0, seed=1, best_of=n) for n in (1, 4)}
    (direct,) = model.engine.run([Request("r", load_audio(REPEATS), DecodingOptions(
        temperature=1.0, seed=seed, best_of=4, max_new_tokens=MAX_NEW))])
    assert got[4] == [t for t in direct.token_ids if t < EOT]
    assert got[4] != got[1]


def test_cli_flags_decode_as_transformers(tmp_path, model, plain):
    from oasr.cli.app import app

    cfg, tok = model.engine.loaded.model.config, model.engine.loaded.tokenizer
    banned = plain[-3]
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, [
        "transcribe", str(REPEATS), "-o", str(out), "--device", "cpu", "--no-progress",
        "--no-language-check", "--no-word-timestamps", "--max-new-tokens", str(MAX_NEW),
        "--repetition-penalty", "1.5", "--suppress-tokens", f"-1,{banned}",
        "--no-suppress-blank"])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    expected = _oracle(model, REPEATS, repetition_penalty=1.5, begin_suppress_tokens=None,
                       suppress_tokens=[*cfg.suppress_tokens, banned])
    assert row["text"] == tok.decode(expected).strip()
    assert row["text"] != tok.decode(plain).strip()
    # An English-only model measures no language: the column is there, null.
    assert "language_probability" in row and row["language_probability"] is None
