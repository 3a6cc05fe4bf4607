"""Global CMVN loading (WeNet JSON, Kaldi text and binary stats) and application, against
kaldi-native-fbank's ``compute_cmvn_stats`` / ``apply_cmvn`` (Kaldi's layout and semantics)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from oasr.features.cmvn import apply_cmvn, load_global_cmvn

knf = pytest.importorskip("kaldi_native_fbank")


@pytest.fixture(scope="module")
def feats() -> np.ndarray:
    """(T, F) float32 features with a different mean and spread per dimension."""
    rng = np.random.default_rng(11)
    loc = rng.uniform(-5.0, 15.0, 7)
    scale = rng.uniform(0.1, 4.0, 7)
    return (rng.standard_normal((300, 7)) * scale + loc).astype(np.float32)


@pytest.fixture(scope="module")
def stats(feats: np.ndarray) -> np.ndarray:
    """Kaldi's (2, F + 1) accumulator, as compute-cmvn-stats holds it."""
    return knf.compute_cmvn_stats(feats)


def _write_json(path: Path, stats: np.ndarray) -> Path:
    path.write_text(json.dumps({
        "mean_stat": stats[0, :-1].tolist(),
        "var_stat": stats[1, :-1].tolist(),
        "frame_num": int(stats[0, -1]),
    }))
    return path


def _write_kaldi_text(path: Path, stats: np.ndarray) -> Path:
    # compute-cmvn-stats --binary=false: " [\n  row0 \n  row1 ]\n".
    rows = [" ".join(repr(float(v)) for v in row) for row in stats]
    path.write_text(f" [\n  {rows[0]} \n  {rows[1]} ]\n")
    return path


def _write_kaldi_binary(path: Path, stats: np.ndarray, token: bytes = b"DM ") -> Path:
    dtype = "<f8" if token == b"DM " else "<f4"
    rows, cols = stats.shape
    header = b"\0B" + token + b"\x04" + struct.pack("<i", rows) + b"\x04" + struct.pack("<i", cols)
    path.write_bytes(header + stats.astype(dtype).tobytes())
    return path


def test_formats_agree_with_the_statistics(tmp_path: Path, feats, stats) -> None:
    files = [
        _write_json(tmp_path / "global_cmvn", stats),  # the format comes from the content
        _write_kaldi_text(tmp_path / "cmvn.txt", stats),
        _write_kaldi_binary(tmp_path / "cmvn.ark", stats),
    ]
    expected_mean = feats.astype(np.float64).mean(axis=0)
    expected_istd = 1.0 / feats.astype(np.float64).std(axis=0)  # population std, as Kaldi's
    for path in files:
        mean, istd = load_global_cmvn(path)
        assert mean.dtype == istd.dtype == torch.float32
        assert mean.shape == istd.shape == (feats.shape[1],)
        np.testing.assert_allclose(mean.numpy(), expected_mean, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(istd.numpy(), expected_istd, rtol=1e-5)
    # A float32 binary matrix rounds the sums; still the same statistics.
    mean, istd = load_global_cmvn(_write_kaldi_binary(tmp_path / "f.ark", stats, b"FM "))
    np.testing.assert_allclose(istd.numpy(), expected_istd, rtol=1e-3)


def test_kaldi_text_on_one_line(tmp_path: Path, stats) -> None:
    path = tmp_path / "one_line"
    path.write_text("[ " + " ".join(repr(float(v)) for v in stats.ravel()) + " ]")
    mean, istd = load_global_cmvn(path)
    ref_mean, ref_istd = load_global_cmvn(_write_kaldi_text(tmp_path / "two_lines", stats))
    assert torch.equal(mean, ref_mean) and torch.equal(istd, ref_istd)


@pytest.mark.parametrize("norm_vars", [True, False])
def test_apply_matches_kaldi(tmp_path: Path, feats, stats, norm_vars: bool) -> None:
    mean, istd = load_global_cmvn(_write_kaldi_text(tmp_path / "cmvn", stats))
    opts = knf.CmvnOptions()
    opts.norm_vars = norm_vars
    expected = knf.apply_cmvn(stats, opts, feats)
    ours = apply_cmvn(torch.from_numpy(feats), mean, istd if norm_vars else None)
    np.testing.assert_allclose(ours.numpy(), expected, atol=2e-5, rtol=1e-5)
    if norm_vars:
        np.testing.assert_allclose(ours.numpy().mean(0), 0.0, atol=1e-4)
        np.testing.assert_allclose(ours.numpy().std(0), 1.0, rtol=1e-4)


def test_apply_batched_follows_dtype_and_device(feats) -> None:
    mean = torch.from_numpy(feats.mean(0))
    istd = torch.from_numpy(1.0 / feats.std(0))
    batch = torch.from_numpy(np.stack([feats[:100], feats[100:200]]))  # (B, T, F)
    out = apply_cmvn(batch, mean, istd)
    assert out.shape == batch.shape
    torch.testing.assert_close(out[1], apply_cmvn(batch[1], mean, istd))
    wide = apply_cmvn(batch.to(torch.float64), mean, istd)
    assert wide.dtype == torch.float64
    with pytest.raises(ValueError, match="dim 7"):
        apply_cmvn(batch, mean[:5], istd[:5])
    with pytest.raises(ValueError, match="istd"):
        apply_cmvn(batch, mean, istd[:5])


def test_variance_is_floored(tmp_path: Path) -> None:
    # Dimension 1 is constant (zero variance, or slightly negative after rounding).
    frames = np.array([[1.0, 3.0], [2.0, 3.0], [4.0, 3.0]], dtype=np.float32)
    stats = knf.compute_cmvn_stats(frames)
    mean, istd = load_global_cmvn(_write_json(tmp_path / "c.json", stats))
    assert mean.tolist() == pytest.approx([7.0 / 3.0, 3.0])
    assert float(istd[1]) == pytest.approx(1e10, rel=1e-6)
    assert float(istd[0]) == pytest.approx(1.0 / np.std([1.0, 2.0, 4.0]), rel=1e-6)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "not a global CMVN file"),
        (b"mean 1 2 3\n", "not a global CMVN file"),
        (b'{"mean_stat": [1, 2], "var_stat": [3, 4]}', "frame_num"),
        (b'{"mean_stat": [1, 2], "var_stat": [3], "frame_num": 2}', "equal-length"),
        (b'{"mean_stat": [1, 2], "var_stat": [3, 4], "frame_num": 0}', "positive"),
        (b"{not json", "bad WeNet CMVN JSON"),
        (b"[ 1 2 3\n 4 5 6 0 ]", "differ in length"),
        (b"[ 1 2 3 4 5 ]", r"\(2, F \+ 1\)"),
        (b"[ 1 2 x\n 4 5 0 ]", "numbers only"),
        (b"[ 1 2 0\n 4 5 0 ]", "positive"),
        (b"\0BDM \x04\x02\x00\x00\x00\x04\x03\x00\x00\x00" + b"\0" * 8, "truncated"),
        (b"\0BCM \x04\x02\x00\x00\x00\x04\x03\x00\x00\x00", "FM/DM"),
    ],
)
def test_bad_files_name_the_file(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "stats_file"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match) as info:
        load_global_cmvn(path)
    assert str(path) in str(info.value)
