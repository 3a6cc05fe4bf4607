"""``oasr convert`` of a FunASR Paraformer folder, then ``oasr transcribe --model BUNDLE`` on a
real LibriSpeech clip: the row's text is FunASR's tokens (random weights: parity, not WER)."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.tokenizers.funasr_char import FunasrCharTokenizer
from tests.helpers.data import SHARED_DATA
from tests.models.paraformer.funasr_folder import TOKENS, funasr_frontend, write_folder

CLIP = SHARED_DATA / "librispeech-test-other-70" / "audio" / "1688-142285-0003.flac"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))


def test_convert_then_transcribe_gives_funasrs_tokens(tmp_path):
    if not CLIP.is_file():
        pytest.skip(f"needs {CLIP}")
    folder = tmp_path / "funasr"
    ref = write_folder(folder)
    wav = torch.from_numpy(sf.read(CLIP, dtype="float32")[0])
    with torch.no_grad():
        feats, lens = funasr_frontend(folder)(wav[None], torch.tensor([len(wav)]))
    want = ref.infer(feats, lens)["ids"][0]
    assert len(want) > 10

    bundle = tmp_path / "bundle"
    done = runner.invoke(app, ["convert", str(folder), str(bundle)])
    assert done.exit_code == 0, done.output
    out = tmp_path / "o.jsonl"
    done = runner.invoke(app, ["transcribe", str(CLIP), "--model", str(bundle), "-o", str(out),
                               "-f", "jsonl", "--no-progress", "--word-timestamps"])
    assert done.exit_code == 0, done.output
    (row,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert row["error"] is None
    assert row["text"] == FunasrCharTokenizer(TOKENS).decode(want)
    # Word timings from the CIF fire windows (60 ms encoder frames): one per word, ordered,
    # inside the clip.
    words = row["words"]
    assert [w["word"] for w in words] == row["text"].split()
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and all(w["end"] > w["start"] for w in words)
    assert words[-1]["end"] <= len(wav) / 16000 + 0.06
