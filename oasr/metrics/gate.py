"""Error-rate gates: a JSON file of recorded rates that a run must not exceed.

The file maps a key to one entry::

    {"whisper-tiny.en/librispeech-clean-200": {
        "error_rate_pct": 3.73, "tolerance_pct": 0.3, "metric": "wer",
        "normalizer": "whisper", "note": "optional free text"}}

A run passes when its rate, in percent, is at most ``error_rate_pct + tolerance_pct``. Both
sides are compared at ``PCT_DIGITS`` decimals, the precision rates are recorded at, so re-checking
the run that was just recorded always passes. Recording rewrites the file atomically (a temp file
in the same folder, then ``os.replace``) and keeps every other key and field.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_TOLERANCE_PCT",
    "METRICS",
    "PCT_DIGITS",
    "GateCheck",
    "GateEntry",
    "GateError",
    "check_gate",
    "load_gate",
    "record_gate",
]

DEFAULT_TOLERANCE_PCT = 0.3
PCT_DIGITS = 4
METRICS = ("wer", "cer")


class GateError(ValueError):
    """The gate file or entry cannot be used as asked; the message names the file and the fix."""


@dataclass(frozen=True)
class GateEntry:
    error_rate_pct: float
    tolerance_pct: float
    metric: str
    normalizer: str
    note: str | None = None


@dataclass(frozen=True)
class GateCheck:
    """The outcome of one check; ``message`` is the sentence to print."""

    key: str
    metric: str
    measured_pct: float
    recorded_pct: float
    tolerance_pct: float
    passed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "metric": self.metric,
            "measured_pct": self.measured_pct,
            "recorded_pct": self.recorded_pct,
            "tolerance_pct": self.tolerance_pct,
            "passed": self.passed,
        }


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise GateError(f"{path}: no such gate file; create it with --record") from e
    except json.JSONDecodeError as e:
        raise GateError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}); fix it") from e
    if not isinstance(data, dict):
        raise GateError(f"{path}: a gate file is a JSON object mapping keys to entries")
    return data


def _entry(path: Path, key: str, raw: Any) -> GateEntry:
    if not isinstance(raw, dict):
        raise GateError(f"{path}: entry {key!r} is not a JSON object")
    missing = [f for f in ("error_rate_pct", "metric", "normalizer") if f not in raw]
    if missing:
        raise GateError(
            f"{path}: entry {key!r} lacks {', '.join(missing)}; re-create it with --record"
        )
    metric = raw["metric"]
    if metric not in METRICS:
        raise GateError(
            f"{path}: entry {key!r} has metric {metric!r}; use one of {', '.join(METRICS)}"
        )
    try:
        rate = float(raw["error_rate_pct"])
        tolerance = float(raw.get("tolerance_pct", DEFAULT_TOLERANCE_PCT))
    except (TypeError, ValueError) as e:
        raise GateError(f"{path}: entry {key!r} has a non-numeric rate or tolerance") from e
    note = raw.get("note")
    return GateEntry(rate, tolerance, metric, str(raw["normalizer"]),
                     None if note is None else str(note))


def load_gate(path: str | Path, key: str) -> GateEntry:
    """The entry under ``key``; raises ``GateError`` naming the keys present when it is absent."""
    path = Path(path)
    data = _read_file(path)
    if key not in data:
        keys = ", ".join(sorted(data)) or "none"
        raise GateError(
            f"{path}: no entry {key!r} (keys: {keys}); pass an existing --key or add this one "
            "with --record"
        )
    return _entry(path, key, data[key])


def _digits(measured: float, limit: float) -> int:
    # Two decimals unless they would print a failing rate equal to its limit.
    return 2 if f"{measured:.2f}" != f"{limit:.2f}" else PCT_DIGITS


def check_gate(entry: GateEntry, key: str, measured_rate: float, normalizer: str) -> GateCheck:
    """Compare ``measured_rate`` (a fraction, of ``entry.metric``) against the entry.

    Raises ``GateError`` when ``normalizer`` differs from the one the entry was recorded with:
    rates under different normalizers are not comparable.
    """
    if normalizer != entry.normalizer:
        raise GateError(
            f"gate {key!r} was recorded with the {entry.normalizer!r} normalizer but this run "
            f"uses {normalizer!r}; pass --normalizer {entry.normalizer} or re-record the entry "
            "with --record"
        )
    measured = round(measured_rate * 100.0, PCT_DIGITS)
    limit = round(entry.error_rate_pct + entry.tolerance_pct, PCT_DIGITS)
    passed = measured <= limit
    digits = 2 if passed else _digits(measured, limit)
    name = entry.metric.upper()
    m, r, t = (f"{v:.{digits}f}" for v in (measured, entry.error_rate_pct, entry.tolerance_pct))
    if passed:
        message = f"{name} {m}% is within the recorded {r}% + tolerance {t}% for key {key}"
    else:
        message = f"{name} {m}% exceeds the recorded {r}% + tolerance {t}% for key {key}"
    return GateCheck(key, entry.metric, measured, entry.error_rate_pct, entry.tolerance_pct,
                     passed, message)


def record_gate(
    path: str | Path,
    key: str,
    *,
    rates: dict[str, float],
    normalizer: str,
    default_metric: str = "wer",
) -> GateEntry:
    """Write ``key``'s entry with the measured rate; returns the entry written.

    ``rates`` maps metric name to the measured fraction. An existing entry keeps its metric,
    tolerance, note and any other field; a new one gets ``default_metric`` and
    ``DEFAULT_TOLERANCE_PCT``. The normalizer is set to this run's.
    """
    path = Path(path)
    data = _read_file(path) if path.exists() else {}
    old = data.get(key, {})
    if not isinstance(old, dict):
        raise GateError(f"{path}: entry {key!r} is not a JSON object; fix or remove it")
    metric = old.get("metric", default_metric)
    if metric not in METRICS:
        raise GateError(
            f"{path}: entry {key!r} has metric {metric!r}; use one of {', '.join(METRICS)}"
        )
    new = dict(old)
    new["error_rate_pct"] = round(rates[metric] * 100.0, PCT_DIGITS)
    new.setdefault("tolerance_pct", DEFAULT_TOLERANCE_PCT)
    new["metric"] = metric
    new["normalizer"] = normalizer
    data[key] = new
    _write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return _entry(path, key, new)


def _write_atomic(path: Path, text: str) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    if path.exists():
        mode = path.stat().st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
