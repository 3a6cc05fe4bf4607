"""faster-whisper's flags on ``oasr transcribe``: --beam-size, --temperature (and its fallback),
--threads, --quiet, -d help, --version."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from tests.transcribe.conftest import clip

SHORT = ("1688-142285-0002", "1688-142285-0003")
runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_thread")



def run(bundle: Path, *args: object):
    return runner.invoke(app, ["transcribe", *map(str, args), "--model", str(bundle),
                               "--no-progress"])


def flat(text: str) -> str:
    return " ".join(text.split())


def test_version():
    from oasr import __version__

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"oasr {__version__}"


def test_decode_option_help_lists_family_options_without_an_output():
    res = runner.invoke(app, ["transcribe", "-d", "help"])
    assert res.exit_code == 0, res.output
    assert "beam_size" in res.output and "length_penalty" in res.output
    assert "rescoring_ctc_weight" in res.output


def test_beam_size_becomes_the_family_option(bundle, tmp_path):
    out = tmp_path / "o.parquet"
    res = run(bundle, clip(SHORT[0]), "-o", out, "--beam-size", "2")
    assert res.exit_code == 0, res.output
    meta = pq.read_schema(out).metadata
    assert json.loads(meta[b"decode_options"])["beam_size"] == 2  # resolved, typed
    bad = run(bundle, clip(SHORT[0]), "-o", tmp_path / "b.parquet", "--beam-size", "0")
    assert bad.exit_code == 2 and "--beam-size must be >= 1" in bad.output


def test_sampling_with_beam_search_is_refused_up_front(bundle, tmp_path):
    res = run(bundle, clip(SHORT[0]), "-o", tmp_path / "o.parquet", "--beam-size", "2",
              "--temperature", "0,0.5")
    assert res.exit_code == 2
    assert "cannot be combined with beam search" in flat(res.output)


def test_temperature_schedule_is_seeded_and_reproducible(bundle, tmp_path):
    texts = []
    for k in range(2):
        out = tmp_path / f"o{k}.jsonl"
        res = run(bundle, clip(SHORT[0]), clip(SHORT[1]), "-o", out, "--temperature",
                  "0,0.5,1.0", "--log-prob-threshold", "100")  # every window falls back
        assert res.exit_code == 0, res.output
        texts.append({r["id"]: r["text"] for r in map(json.loads, out.read_text().splitlines())})
    assert texts[0] == texts[1] and all(texts[0].values())
    bad = run(bundle, clip(SHORT[0]), "-o", tmp_path / "x.jsonl", "--temperature", "warm")
    assert bad.exit_code == 2 and "expected a number or a comma list" in flat(bad.output)


def test_threads_and_quiet(bundle, tmp_path):
    before = torch.get_num_threads()
    try:
        res = run(bundle, clip(SHORT[0]), "-o", tmp_path / "o.parquet", "--threads", "1",
                  "--quiet")
        assert res.exit_code == 0, res.output
        assert torch.get_num_threads() == 1
        assert "wrote" not in res.output and "RTFx" not in res.output
    finally:
        torch.set_num_threads(before)


def test_initial_prompt_and_conditioning_reach_the_engine(bundle, tmp_path, monkeypatch):
    from oasr.engine.engine import ASREngine

    prompts: list[str | None] = []
    add = ASREngine.add_request

    def spy(self, request):
        prompts.append(request.decoding.prompt)
        return add(self, request)

    monkeypatch.setattr(ASREngine, "add_request", spy)
    out = tmp_path / "o.parquet"
    res = run(bundle, clip(SHORT[0]), "-o", out, "--initial-prompt", "Mr. Thornton",
              "--condition-on-previous-text", "--no-speech-threshold", "0.5")
    assert res.exit_code == 0, res.output
    from oasr.tokenizers import build_tokenizer
    from tests.transcribe.conftest import TOKENIZER_SPEC, tokenizer_folder

    # Conditioning carries the prompt on as token ids (the first window's: the initial prompt).
    tok = build_tokenizer(TOKENIZER_SPEC, tokenizer_folder())
    assert prompts == [list(tok.encode(" Mr. Thornton"))]
    prompts.clear()
    # On by default for Whisper: the same ids without the flag.
    default = run(bundle, clip(SHORT[0]), "-o", tmp_path / "d.parquet", "--initial-prompt",
                  "Mr. Thornton")
    assert default.exit_code == 0, default.output
    assert prompts == [list(tok.encode(" Mr. Thornton"))]
    assert pq.read_schema(tmp_path / "d.parquet").metadata[
        b"condition_on_previous_text"] == b"true"
    prompts.clear()
    plain = run(bundle, clip(SHORT[0]), "-o", tmp_path / "p.parquet", "--initial-prompt",
                "Mr. Thornton", "--no-condition-on-previous-text")
    assert plain.exit_code == 0, plain.output
    assert prompts == ["Mr. Thornton"]
    assert pq.read_schema(tmp_path / "p.parquet").metadata[
        b"condition_on_previous_text"] == b"false"
    meta = pq.read_schema(out).metadata
    assert meta[b"initial_prompt"] == b"Mr. Thornton"
    assert meta[b"condition_on_previous_text"] == b"true"
    bad = run(bundle, clip(SHORT[0]), "-o", tmp_path / "b.parquet", "--no-speech-threshold",
              "1.5")
    assert bad.exit_code == 2 and "--no-speech-threshold must be in [0, 1]" in flat(bad.output)
