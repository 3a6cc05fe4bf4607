"""The CI accuracy gate: tiny.en, greedy, fp32, CPU on the 70 bundled LibriSpeech utterances.

Runs ``oasr transcribe`` and ``oasr wer --gate`` exactly as a CI pipeline would; the recorded
rate and its tolerance live in ``ci/wer-reference.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from oasr.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "manifests" / "librispeech-test-other-70.parquet"
GATE = ROOT / "ci" / "wer-reference.json"
KEY = "whisper-tiny.en/greedy/fp32/cpu/librispeech-test-other-70"
# transformers' greedy output on the same audio (scripts/make_transformers_reference.py).
REFERENCE = ROOT / "tests" / "fixtures" / "whisper_tiny_en_transformers_70.json"


def test_tiny_en_wer_stays_within_the_recorded_gate(tmp_path):
    runner = CliRunner()
    hyp = tmp_path / "hyp.parquet"
    result = runner.invoke(app, ["transcribe", str(MANIFEST), "-o", str(hyp), "--device", "cpu",
                                 "--dtype", "fp32", "--no-progress"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["wer", str(MANIFEST), str(hyp), "--gate", str(GATE),
                                 "--key", KEY, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["utterances"] == 70 and not report["missing_ids"]
    entry = json.loads(GATE.read_text())[KEY]
    assert abs(100 * report["wer"] - entry["error_rate_pct"]) <= entry["tolerance_pct"]

    # Against transformers' greedy decode of the same weights and audio: WER within 0.3
    # absolute and identical transcripts on at least 95% of utterances.
    import pyarrow.parquet as pq

    from oasr.metrics.wer import score

    theirs = json.loads(REFERENCE.read_text())["transcripts"]
    ours = {r["id"]: r["text"] for r in pq.read_table(hyp, columns=["id", "text"]).to_pylist()}
    refs = {r["id"]: r["text"]
            for r in pq.read_table(MANIFEST, columns=["id", "text"]).to_pylist()}
    assert abs(score(refs, ours).wer - score(refs, theirs).wer) <= 0.003
    identical = sum(ours[k] == theirs[k] for k in refs) / len(refs)
    assert identical >= 0.95, f"only {identical:.0%} of transcripts match transformers'"
