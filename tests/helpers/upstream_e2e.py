"""End-to-end upstream parity: the fixtures under ``tests/fixtures/<name>/`` and the user path
they are checked through.

Each fixture folder holds one or more tiny random checkpoints in the layout the upstream project
writes, ``make.py`` (which built them with the upstream project's own code and ran its own
recipe on the clips below) and ``expected.json`` (what that recipe produced: text and token ids
per clip, per decoding). The tests convert the checkpoint with ``oasr convert``, transcribe the
same clips with ``oasr transcribe`` (default flags unless the decoding names some) and compare
the text and the token ids (read from the engine inside those very runs: the CLI writes no
token-id column). Each runs on the CPU, and in fp32 on CUDA where there is
one (``DEVICES``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.helpers.data import SHARED_DATA

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
# Five short LibriSpeech test-other utterances, five speakers (13.4 s in all).
CLIPS = ("1688-142285-0002", "1998-15444-0008", "2414-128291-0009", "3005-163389-0007",
         "3080-5032-0003")


# The devices a fixture is decoded on, fp32 on each (so the comparison is exact): the CPU, and
# CUDA where there is one (gpu-marked).
DEVICES = ("cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                        reason="needs a CUDA device")]))


def full_fp32(device: str, monkeypatch) -> None:  # noqa: ANN001
    """On CUDA, fp32 as recorded for the rest of the test: cuDNN computes fp32 convolutions in
    TF32 by default, which moves near-tied argmaxes of random weights away from the upstream
    outputs recorded in full fp32 (matmuls are full fp32 unless a process asks otherwise)."""
    if device == "cuda":
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


def clip_paths() -> list[Path]:
    return [AUDIO / f"{c}.flac" for c in CLIPS]


def read_clip(path: Path) -> np.ndarray:
    """A clip's samples, float32 mono at its own rate (16 kHz for these)."""
    import soundfile as sf

    wav, rate = sf.read(str(path), dtype="float32")
    if rate != 16000 or wav.ndim != 1:
        raise ValueError(f"{path}: expected 16 kHz mono, got {rate} Hz shape {wav.shape}")
    return wav


def write_expected(folder: Path, upstream: dict[str, str], variants: dict[str, Any]) -> None:
    """``expected.json``: ``upstream`` names the packages and versions that produced it;
    ``variants[name][decoding][clip] = {"text": ..., "token_ids": [...]}``."""
    body = {"upstream": upstream, "clips": list(CLIPS), "variants": variants}
    (folder / "expected.json").write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n",
                                          encoding="utf-8")


def load_expected(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "expected.json").read_text(encoding="utf-8"))


def require_audio() -> None:
    missing = [p for p in clip_paths() if not p.is_file()]
    if missing:
        pytest.skip(f"{missing[0]} (LibriSpeech test-other clips in shared/data) is not here")


def convert(src: Path, bundle: Path, *args: str) -> str:
    """``oasr convert SRC BUNDLE [args]``; returns its output."""
    from typer.testing import CliRunner

    from oasr.cli.app import app

    res = CliRunner().invoke(app, ["convert", str(src), str(bundle), *args])
    assert res.exit_code == 0, res.output
    return res.output


def convert_fixture(src: Path, tmp_path: Path, monkeypatch, device: str = "cpu"  # noqa: ANN001
                    ) -> tuple[Path, str]:
    """Every fixture test's start: the clips present, fp32 as recorded on ``device``, a model
    cache of the test's own, then ``oasr convert SRC TMP/bundle``; (the bundle, convert's
    output, which names the converter that took the layout)."""
    require_audio()
    full_fp32(device, monkeypatch)
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    bundle = tmp_path / "bundle"
    return bundle, convert(src, bundle)


def transcribe(bundle: Path, out_dir: Path, *args: str,
               device: str = "cpu") -> dict[str, dict[str, Any]]:
    """``oasr transcribe CLIPS --model BUNDLE --device DEVICE --dtype fp32 -o OUT [args]``; the
    rows by id, each with the ``token_ids`` its engine emitted in that very run (read from
    ``ASREngine.run``'s outputs: the CLI writes no token-id column)."""
    from typer.testing import CliRunner

    from oasr.cli.app import app
    from oasr.engine.engine import ASREngine

    ids: dict[str, list[int]] = {}
    run = ASREngine.run

    def spy(self, *a, **kw):  # noqa: ANN001, ANN202
        for o in run(self, *a, **kw):
            row, _, window = o.request_id.partition("\x1f")
            assert window in ("", "w0"), o.request_id  # each clip is one window
            ids[row] = list(o.token_ids)
            yield o

    out = out_dir / "out.jsonl"
    ASREngine.run = spy
    try:
        res = CliRunner().invoke(app, ["transcribe", *map(str, clip_paths()), "--model",
                                       str(bundle), "--no-progress", "--device", device,
                                       "--dtype", "fp32", "-o", str(out), *args])
    finally:
        ASREngine.run = run
    assert res.exit_code == 0, res.output
    rows = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert set(rows) == set(CLIPS) == set(ids), (sorted(rows), sorted(ids))
    for clip, r in rows.items():
        assert r["error"] is None, r
        r["token_ids"] = ids[clip]
    return rows


def assert_matches(expected: dict[str, dict[str, Any]],
                   rows: dict[str, dict[str, Any]]) -> None:
    """Every clip's ``text`` and ``token_ids`` equal upstream's; upstream emitted tokens on some
    clip (random weights could emit none, and then nothing was compared)."""
    assert any(e["token_ids"] for e in expected.values())
    ours = {c: (rows[c]["text"], rows[c]["token_ids"]) for c in expected}
    differ = {c: {"ours": ours[c], "upstream": (e["text"], e["token_ids"])}
              for c, e in expected.items() if ours[c] != (e["text"], e["token_ids"])}
    assert not differ, f"{len(differ)} of {len(expected)} clips differ: {differ}"
