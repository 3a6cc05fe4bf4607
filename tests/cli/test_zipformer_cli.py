"""``oasr convert`` an icefall Zipformer folder (random weights in icefall's layout, saved as
``pretrained.pt`` with a ``model`` state dict, ``tokens.txt``, a ``params.json`` for the
feature width) into a bundle, then ``oasr transcribe --model BUNDLE`` with ctc, transducer
greedy and beam. The bundle must hold exactly the converted tensors; each run must exit 0
with one error-free row per clip (decode parity with upstream is test_model_parity.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.models.zipformer.converters import model_state_dict
from tests.helpers.zipformer_oracle import ORACLE_MISSING, oracle
from tests.transcribe.conftest import clip

runner = CliRunner()
PIECES = ["<blk>", "\u2581a", "\u2581b", "c", "d", "\u2581e", "f", "g", "\u2581h", "i", "j",
          "k", "<unk>"]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def icefall_dir(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    up = oracle()
    if up is None:
        pytest.skip(ORACLE_MISSING)
    from tests.models.zipformer.test_model_parity import models

    ref, _ = models(up, 0)
    folder = tmp_path_factory.mktemp("icefall")
    torch.save({"model": ref.state_dict()}, folder / "pretrained.pt")
    (folder / "tokens.txt").write_text("".join(f"{p} {i}\n" for i, p in enumerate(PIECES)),
                                       encoding="utf-8")
    (folder / "params.json").write_text(json.dumps({"feature_dim": 20}), encoding="utf-8")
    return folder, ref


def test_convert_then_transcribe_ctc_greedy_and_beam(icefall_dir, tmp_path):
    folder, ref = icefall_dir
    bundle = tmp_path / "bundle"
    result = runner.invoke(app, ["convert", str(folder), str(bundle)])
    assert result.exit_code == 0, result.output

    from oasr.models.loader import load_pretrained

    loaded = load_pretrained(str(bundle))
    want = model_state_dict(ref.state_dict())
    got = loaded.model.state_dict()
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert loaded.model.encoder.streaming_kind == "none"

    audio = [clip("1688-142285-0002"), clip("1688-142285-0003")]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": str(i), "audio": str(a)}) + "\n"
                                for i, a in enumerate(audio)), encoding="utf-8")
    for name, flags in (("ctc", ["--decode-method", "ctc", "-d", "beam_size=1"]),
                        ("greedy", []), ("beam", ["-d", "beam_size=4"])):
        out = tmp_path / f"{name}.jsonl"
        result = runner.invoke(app, ["transcribe", str(manifest), "-o", str(out), "-f",
                                     "jsonl", "--model", str(bundle), "--no-progress", *flags])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert [r["id"] for r in sorted(rows, key=lambda r: r["id"])] == ["0", "1"]
        assert all(r["error"] is None and isinstance(r["text"], str) for r in rows), rows
    # Previous-text conditioning is Whisper's: off by default here, refused when asked for.
    result = runner.invoke(app, ["transcribe", str(manifest), "-o", str(tmp_path / "c.jsonl"),
                                 "--model", str(bundle), "--no-progress",
                                 "--condition-on-previous-text"])
    assert result.exit_code == 2, result.output
    assert "takes no prompt" in " ".join(result.output.split())
    assert not (tmp_path / "c.jsonl").exists()


ICEFALL = Path(__file__).resolve().parents[1] / "fixtures" / "icefall_zipformer"


def test_convert_a_checkpoint_file_prints_what_it_assumed(tmp_path):
    src = ICEFALL / "causal_export_params"
    result = runner.invoke(app, ["convert", str(src / "exp" / "pretrained.pt"),
                                 str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "format: icefall (architecture zipformer)" in out
    assert f"note: checkpoint {src / 'exp' / 'pretrained.pt'}" in out
    assert "note: decode_chunk_size=16 (no chunk_size in the checkpoint" in out
    assert "set it with --params" in out


def test_convert_refuses_flags_that_do_not_fit(tmp_path):
    src = ICEFALL / "causal_export_params"
    args = ["convert", str(src / "exp" / "pretrained.pt"), str(tmp_path / "a"),
            "--checkpoint-name", "epoch-1.pt"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "names another" in result.output
    result = runner.invoke(app, ["convert", str(src), str(tmp_path / "b"), "--params",
                                 str(tmp_path / "absent.json")])
    assert result.exit_code == 2 and "absent.json does not exist" in result.output
    wenet = Path(__file__).resolve().parents[1] / "fixtures" / "wenet_tiny" / "u2pp_conv2d4"
    result = runner.invoke(app, ["convert", str(wenet), str(tmp_path / "c"), "--params",
                                 str(src / "train_args.json")])
    assert result.exit_code == 2 and "takes no params file" in result.output
