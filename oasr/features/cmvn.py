"""Global CMVN: cepstral mean and variance statistics, loaded from a file and applied to features.

Both formats hold the same accumulated statistics over ``count`` training frames: per feature
dimension, the sum of the features and the sum of their squares. From them

    mean = sum / count,    var = sum_sq / count - mean^2,    istd = 1 / sqrt(max(var, 1e-20)),

as WeNet computes them, in float64 before the cast to float32. The file's format is read from its
content, not its name:
- WeNet JSON: ``{"mean_stat": [F sums], "var_stat": [F sums of squares], "frame_num": count}``;
- a Kaldi stats matrix of shape (2, F + 1), as ``compute-cmvn-stats`` writes it: row 0 the sums
  then the count, row 1 the sums of squares then 0. Text (``--binary=false``: ``[ ... ]``) or
  binary (``\\0B`` then ``FM``/``DM``, dims and raw values).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import torch

VAR_FLOOR = 1e-20


def load_global_cmvn(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read global CMVN stats -> (mean (F,), istd (F,)) float32 CPU tensors."""
    path = Path(path)
    raw = path.read_bytes()
    head = raw.lstrip()[:1]
    if raw.startswith(b"\0B"):
        stats = _kaldi_binary_stats(raw, path)
    elif head == b"{":
        return _from_sums(*_json_stats(raw, path), path)
    elif head == b"[":
        stats = _kaldi_text_stats(raw, path)
    else:
        raise ValueError(
            f"{path}: not a global CMVN file: expected WeNet JSON ({{'mean_stat', 'var_stat', "
            f"'frame_num'}}) or a Kaldi stats matrix (text '[ ... ]' or binary '\\0B')"
        )
    return _from_kaldi_matrix(stats, path)


def apply_cmvn(
    feats: torch.Tensor, mean: torch.Tensor, istd: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, T, F) or (T, F) -> ``(feats - mean) * istd``; ``istd=None`` normalizes the mean only.

    ``mean`` / ``istd`` are (F,) and follow ``feats``' device and dtype. Padded frames are
    normalized too, as WeNet's GlobalCMVN does; masks downstream ignore them.
    """
    if mean.shape != (feats.shape[-1],):
        raise ValueError(
            f"CMVN mean has shape {tuple(mean.shape)}, features have dim {feats.shape[-1]}"
        )
    out = feats - mean.to(device=feats.device, dtype=feats.dtype)
    if istd is not None:
        if istd.shape != mean.shape:
            raise ValueError(f"CMVN istd shape {tuple(istd.shape)} != mean {tuple(mean.shape)}")
        out = out * istd.to(device=feats.device, dtype=feats.dtype)
    return out


# -- formats -----------------------------------------------------------------------------------


def _json_stats(raw: bytes, path: Path) -> tuple[np.ndarray, np.ndarray, float]:
    try:
        data = json.loads(raw)
        sums = np.asarray(data["mean_stat"], dtype=np.float64)
        sq_sums = np.asarray(data["var_stat"], dtype=np.float64)
        count = float(data["frame_num"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: bad WeNet CMVN JSON (need numeric 'mean_stat', 'var_stat', 'frame_num'): {e}"
        ) from e
    if sums.ndim != 1 or sums.shape != sq_sums.shape or sums.size == 0:
        raise ValueError(
            f"{path}: 'mean_stat' and 'var_stat' must be equal-length non-empty lists, got "
            f"{sums.shape} and {sq_sums.shape}"
        )
    return sums, sq_sums, count


def _kaldi_text_stats(raw: bytes, path: Path) -> np.ndarray:
    text = raw.decode("ascii", errors="replace").strip()
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"{path}: a Kaldi text matrix must be '[ ... ]'")
    rows = [r.split() for r in text[1:-1].strip().splitlines() if r.strip()]
    if len(rows) == 2 and len(rows[0]) != len(rows[1]):
        raise ValueError(f"{path}: Kaldi stats rows differ in length: {len(rows[0])}, "
                         f"{len(rows[1])}")
    tokens = [v for r in rows for v in r]
    try:
        values = np.asarray([float(v) for v in tokens], dtype=np.float64)
    except ValueError as e:
        raise ValueError(f"{path}: a Kaldi text stats matrix holds numbers only: {e}") from e
    # Two rows of F + 1, however the lines were broken (WeNet reads the tokens the same way).
    if values.size % 2:
        raise ValueError(f"{path}: a Kaldi CMVN stats matrix is (2, F + 1), got {values.size} "
                         f"values")
    return values.reshape(2, -1)


def _kaldi_binary_stats(raw: bytes, path: Path) -> np.ndarray:
    # "\0B", a "FM " or "DM " token, then two (size byte 4, int32 LE) dims, then the values.
    kind = raw[2:5]
    if kind not in (b"FM ", b"DM ") or len(raw) < 15 or raw[5] != 4 or raw[10] != 4:
        raise ValueError(f"{path}: unsupported Kaldi binary object (need an FM/DM matrix)")
    rows, cols = struct.unpack("<i", raw[6:10])[0], struct.unpack("<i", raw[11:15])[0]
    dtype = np.float32 if kind == b"FM " else np.float64
    body = raw[15:]
    if rows < 0 or cols < 0 or len(body) < rows * cols * np.dtype(dtype).itemsize:
        raise ValueError(f"{path}: truncated Kaldi binary matrix ({rows} x {cols})")
    values = np.frombuffer(body, dtype=dtype, count=rows * cols)
    return values.reshape(rows, cols).astype(np.float64)


def _from_kaldi_matrix(stats: np.ndarray, path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    if stats.ndim != 2 or stats.shape[0] != 2 or stats.shape[1] < 2:
        raise ValueError(
            f"{path}: a Kaldi CMVN stats matrix is (2, F + 1), got {tuple(stats.shape)}"
        )
    return _from_sums(stats[0, :-1], stats[1, :-1], float(stats[0, -1]), path)


def _from_sums(
    sums: np.ndarray, sq_sums: np.ndarray, count: float, path: Path
) -> tuple[torch.Tensor, torch.Tensor]:
    if not count > 0:
        raise ValueError(f"{path}: CMVN frame count must be positive, got {count}")
    mean = sums / count
    var = np.maximum(sq_sums / count - mean * mean, VAR_FLOOR)
    istd = 1.0 / np.sqrt(var)
    return torch.from_numpy(mean.astype(np.float32)), torch.from_numpy(istd.astype(np.float32))
