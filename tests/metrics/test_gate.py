"""Error-rate gates: the boundary, the message, normalizer mismatch, and atomic recording."""

from __future__ import annotations

import json
import os

import pytest

from oasr.metrics.gate import GateEntry, GateError, check_gate, load_gate, record_gate


def entry(rate=14.9, tol=0.3, metric="wer", normalizer="whisper"):
    return GateEntry(rate, tol, metric, normalizer)


def test_fail_message_and_boundary():
    c = check_gate(entry(), "K", 0.153, "whisper")
    assert not c.passed
    assert c.message == "WER 15.30% exceeds the recorded 14.90% + tolerance 0.30% for key K"
    at_limit = check_gate(entry(), "K", 0.152, "whisper")  # exactly rate + tolerance
    assert at_limit.passed and "is within" in at_limit.message
    assert check_gate(entry(), "K", 0.10, "whisper").passed


def test_failure_just_above_the_limit_prints_enough_digits():
    c = check_gate(entry(), "K", 0.152004, "whisper")
    assert not c.passed
    assert "15.2004%" in c.message


def test_cer_metric_named_in_message():
    c = check_gate(entry(rate=5.0, tol=0.0, metric="cer"), "K", 0.06, "whisper")
    assert c.message.startswith("CER 6.00% exceeds")


def test_normalizer_mismatch_refused():
    with pytest.raises(GateError, match="'whisper' normalizer but this run uses 'basic'"):
        check_gate(entry(), "K", 0.1, "basic")


def test_load_gate_errors(tmp_path):
    p = tmp_path / "g.json"
    with pytest.raises(GateError, match="no such gate file"):
        load_gate(p, "K")
    p.write_text("{not json")
    with pytest.raises(GateError, match="not valid JSON"):
        load_gate(p, "K")
    p.write_text(json.dumps({"other": {"error_rate_pct": 1, "metric": "wer",
                                       "normalizer": "whisper"}}))
    with pytest.raises(GateError, match="no entry 'K' \\(keys: other\\)"):
        load_gate(p, "K")
    p.write_text(json.dumps({"K": {"error_rate_pct": 1, "metric": "bleu", "normalizer": "x"}}))
    with pytest.raises(GateError, match="metric 'bleu'"):
        load_gate(p, "K")
    p.write_text(json.dumps({"K": {"metric": "wer"}}))
    with pytest.raises(GateError, match="lacks error_rate_pct, normalizer"):
        load_gate(p, "K")


def test_record_creates_then_rechecking_the_same_rate_passes(tmp_path):
    p = tmp_path / "sub" / "g.json"
    rate = 2 / 3  # a rate that does not round evenly
    e = record_gate(p, "K", rates={"wer": rate, "cer": 0.1}, normalizer="whisper")
    assert e.metric == "wer" and e.tolerance_pct == 0.3
    data = json.loads(p.read_text())
    assert data["K"]["error_rate_pct"] == pytest.approx(66.6667)
    assert data["K"]["normalizer"] == "whisper"
    zero_tol = GateEntry(e.error_rate_pct, 0.0, "wer", "whisper")
    assert check_gate(zero_tol, "K", rate, "whisper").passed
    assert [f for f in os.listdir(p.parent)] == ["g.json"]  # no temp file left behind


def test_record_updates_and_keeps_the_rest(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps({
        "K": {"error_rate_pct": 9.0, "tolerance_pct": 0.5, "metric": "cer",
              "normalizer": "basic", "note": "pinned", "extra": 1},
        "other": {"error_rate_pct": 1.0, "metric": "wer", "normalizer": "none"},
    }))
    os.chmod(p, 0o640)
    record_gate(p, "K", rates={"wer": 0.2, "cer": 0.05}, normalizer="whisper")
    data = json.loads(p.read_text())
    assert data["K"] == {"error_rate_pct": 5.0, "tolerance_pct": 0.5, "metric": "cer",
                         "normalizer": "whisper", "note": "pinned", "extra": 1}
    assert data["other"] == {"error_rate_pct": 1.0, "metric": "wer", "normalizer": "none"}
    assert os.stat(p).st_mode & 0o777 == 0o640


def test_record_does_not_clobber_a_broken_file(tmp_path):
    p = tmp_path / "g.json"
    p.write_text("{broken")
    with pytest.raises(GateError, match="not valid JSON"):
        record_gate(p, "K", rates={"wer": 0.1, "cer": 0.1}, normalizer="whisper")
    assert p.read_text() == "{broken"
