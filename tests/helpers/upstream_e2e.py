"""End-to-end upstream parity: the fixtures under ``tests/fixtures/<name>/`` and the user path
they are checked through.

Each fixture folder holds one or more tiny random checkpoints in the layout the upstream project
writes, ``make.py`` (which built them with the upstream project's own code and ran its own
recipe on the clips below) and ``expected.json`` (what that recipe produced: text and token ids
per clip, per decoding). The tests convert the checkpoint with ``oasr convert``, transcribe the
same clips with ``oasr transcribe`` (default flags unless the decoding names some) and compare
the text; the token ids come from the engine that ``oasr transcribe`` runs, on the same bundle
(the CLI has no token-id column yet). Each runs on the CPU, and in fp32 on CUDA where there is
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


def transcribe(bundle: Path, out_dir: Path, *args: str,
               device: str = "cpu") -> dict[str, dict[str, Any]]:
    """``oasr transcribe CLIPS --model BUNDLE --device DEVICE --dtype fp32 -o OUT [args]``; the
    rows by id."""
    from typer.testing import CliRunner

    from oasr.cli.app import app

    out = out_dir / "out.jsonl"
    res = CliRunner().invoke(app, ["transcribe", *map(str, clip_paths()), "--model", str(bundle),
                                   "--no-progress", "--device", device, "--dtype", "fp32",
                                   "-o", str(out), *args])
    assert res.exit_code == 0, res.output
    rows = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert set(rows) == set(CLIPS), sorted(rows)
    for r in rows.values():
        assert r["error"] is None, r
    return rows


def engine_token_ids(bundle: Path, decode_method: str | None = None,
                     decode_options: dict[str, Any] | None = None,
                     device: str = "cpu") -> dict[str, list[int]]:
    """The token ids the engine behind ``oasr transcribe`` emits for each clip (fp32)."""
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.engine.request import Request

    engine = ASREngine(EngineConfig(model=str(bundle), device=device, dtype="float32",
                                    decode_method=decode_method,
                                    decode_options=dict(decode_options or {})))
    requests = [Request(c, read_clip(p)) for c, p in zip(CLIPS, clip_paths())]
    out = {}
    for o in engine.run(requests):
        assert o.error is None, o.error
        out[o.request_id] = list(o.token_ids)
    return out


def assert_matches(expected: dict[str, dict[str, Any]], rows: dict[str, dict[str, Any]],
                   ids: dict[str, list[int]]) -> None:
    """Every clip's text (CLI) and token ids (engine) equal upstream's; upstream emitted tokens
    on some clip (random weights could emit none, and then nothing was compared)."""
    assert any(e["token_ids"] for e in expected.values())
    differ = {c: {"ours": (rows[c]["text"], ids[c]), "upstream": (e["text"], e["token_ids"])}
              for c, e in expected.items() if (rows[c]["text"], ids[c]) != (e["text"],
                                                                            e["token_ids"])}
    assert not differ, f"{len(differ)} of {len(expected)} clips differ: {differ}"
