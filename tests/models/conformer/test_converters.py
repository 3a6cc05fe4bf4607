"""The WeNet converter on the fixture folders: detection, the config read from train.yaml, the
load report, bundles, the checkpoint choice, the CMVN fallback and the refusals.

Oracles: the fixture folders written by upstream WeNet and its reference outputs
(``test_model_parity.py`` says how they were made); WeNet's own CMVN buffers in final.pt,
which WeNet computed from the ``global_cmvn`` stats file beside it.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from oasr.features.kaldi import FBANK_DEFAULTS
from oasr.models.bundle import read_bundle
from oasr.models.conformer import CONFORMER
from oasr.models.conformer.config import ConformerConfig
from oasr.models.conformer.converters import WenetConformerConverter
from oasr.models.converter import IncompleteCheckpointError
from oasr.models.registry import (
    CheckpointConverter,
    NoConverterError,
    detect_converter,
    get_model_entry,
)
from tests.models.conformer.wenet_fixtures import VARIANTS, fixture_dir, reference

U2PP = fixture_dir("u2pp_conv2d4")


def _copy(variant: str, dst: Path) -> Path:
    return Path(shutil.copytree(fixture_dir(variant), dst / variant))


def _edit_yaml(folder: Path, edit) -> None:
    path = folder / "train.yaml"
    cfg = yaml.safe_load(path.read_text())
    edit(cfg)
    path.write_text(yaml.safe_dump(cfg))


def _edit_checkpoint(folder: Path, edit) -> None:
    sd = torch.load(folder / "final.pt", weights_only=True)
    edit(sd)
    torch.save(sd, folder / "final.pt")


# -- registration and detection ----------------------------------------------------------------
def test_entry_is_registered_with_its_decode_families():
    entry = get_model_entry("conformer")
    assert entry is CONFORMER
    assert entry.decode_families == ("ctc", "ctc_aed_rescoring")
    (conv,) = entry.load_converters()
    assert isinstance(conv, WenetConformerConverter)
    assert isinstance(conv, CheckpointConverter)
    assert "\n" not in conv.looks_for


@pytest.mark.parametrize("variant", VARIANTS)
def test_detects_every_fixture_folder(variant):
    conv = detect_converter(fixture_dir(variant))
    assert (conv.architecture, conv.source_format) == ("conformer", "wenet")


def test_refuses_folders_that_are_not_wenet_conformers(tmp_path):
    conv = WenetConformerConverter()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert not conv.detect(empty)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "whisper"}')
    (hf / "pytorch_model.bin").write_bytes(b"")
    assert not conv.detect(hf)
    with pytest.raises(NoConverterError, match="train.yaml with 'encoder: conformer'"):
        detect_converter(hf, architecture="conformer")
    # WeNet, but a transformer encoder; or a conformer transducer.
    other = _copy("u2pp_conv2d4", tmp_path / "transformer")
    _edit_yaml(other, lambda c: c.update(encoder="transformer"))
    assert not conv.detect(other)
    _edit_yaml(other, lambda c: c.update(encoder="conformer", model="transducer"))
    assert not conv.detect(other)
    # Each positive marker is needed: the yaml, a checkpoint, a symbol table.
    for missing in ("train.yaml", "final.pt", "units.txt"):
        folder = _copy("u2pp_conv2d4", tmp_path / f"no_{missing}")
        (folder / missing).unlink()
        assert not conv.detect(folder), missing


def test_tokens_txt_is_accepted_as_the_symbol_table(tmp_path):
    folder = _copy("u2pp_conv2d4", tmp_path)
    (folder / "units.txt").rename(folder / "tokens.txt")
    conv = WenetConformerConverter()
    assert conv.detect(folder)
    assert conv.build_tokenizer_spec(folder).files == {"units": "tokens.txt"}


# -- config --------------------------------------------------------------------------------
def test_config_is_read_from_train_yaml():
    cfg = WenetConformerConverter().build_config(U2PP)
    assert (cfg.input_dim, cfg.vocab_size, cfg.d_model) == (80, 30, 32)
    assert (cfg.encoder_layers, cfg.encoder_heads, cfg.encoder_linear_units) == (2, 2, 64)
    assert (cfg.input_layer, cfg.cnn_module_kernel, cfg.cnn_module_norm) == ("conv2d", 5,
                                                                            "batch_norm")
    assert not cfg.causal and cfg.global_cmvn and cfg.use_dynamic_chunk
    assert (cfg.decoder, cfg.decoder_layers, cfg.r_decoder_layers) == ("bitransformer", 1, 1)
    assert (cfg.blank_id, cfg.sos_id, cfg.eos_id) == (0, 29, 29)
    assert cfg.reverse_weight == pytest.approx(0.3)
    causal = WenetConformerConverter().build_config(fixture_dir("causal_conv2d8"))
    assert causal.causal and causal.input_layer == "conv2d8" and not causal.global_cmvn
    assert (causal.decoder, causal.reverse_weight, causal.cnn_module_norm) == (
        "transformer", 0.0, "layer_norm")
    six = WenetConformerConverter().build_config(fixture_dir("conv2d6_static_chunk"))
    assert (six.input_layer, six.static_chunk_size, six.use_dynamic_chunk) == ("conv2d6", 3,
                                                                              False)


def test_sos_eos_follow_wenet_special_tokens_and_must_agree_with_units(tmp_path):
    folder = _copy("u2pp_conv2d4", tmp_path)
    lines = (folder / "units.txt").read_text().splitlines()
    assert lines[0] == "<blank> 0" and lines[-1] == "<sos/eos> 29"
    _edit_yaml(folder, lambda c: c["tokenizer_conf"].update(special_tokens={
        "<blank>": 0, "<unk>": 1, "<sos>": 2, "<eos>": 2}))
    with pytest.raises(ValueError, match="<sos/eos> is id 29 but the model uses 2/2"):
        WenetConformerConverter().build_config(folder)
    lines = [ln for ln in lines if not ln.startswith("<sos/eos>")]
    (folder / "units.txt").write_text("\n".join(lines) + "\n")
    cfg = WenetConformerConverter().build_config(folder)
    assert (cfg.sos_id, cfg.eos_id) == (2, 2)


def test_legacy_top_level_cmvn_file_means_global_cmvn(tmp_path):
    folder = _copy("u2pp_conv2d4", tmp_path)

    def legacy(c):
        del c["cmvn"], c["cmvn_conf"]
        c.update(cmvn_file="global_cmvn", is_json_cmvn=True)

    _edit_yaml(folder, legacy)
    assert WenetConformerConverter().build_config(folder).global_cmvn
    _edit_yaml(folder, lambda c: c.update(cmvn_file=None))
    assert not WenetConformerConverter().build_config(folder).global_cmvn


@pytest.mark.parametrize("section,key,value", [
    ("encoder_conf", "pos_enc_layer_type", "abs_pos"),
    ("encoder_conf", "input_layer", "conv2d2"),
    ("encoder_conf", "normalize_before", False),
    ("encoder_conf", "selfattention_layer_type", "selfattn"),
    ("encoder_conf", "n_kv_head", 1),
    ("decoder_conf", "src_attention", False),
    ("dataset_conf", "fbank_conf", {"num_mel_bins": 80, "frame_shift": 20,
                                    "frame_length": 25}),
])
def test_unsupported_options_are_refused_by_name(tmp_path, section, key, value):
    folder = _copy("u2pp_conv2d4", tmp_path)
    _edit_yaml(folder, lambda c: c[section].update({key: value}))
    with pytest.raises(ValueError, match="unsupported WeNet options") as err:
        WenetConformerConverter().build_config(folder)
    assert key in str(err.value) or "frame_shift" in str(err.value)


def test_config_round_trips_through_dict():
    cfg = WenetConformerConverter().build_config(U2PP)
    again = ConformerConfig.from_dict(cfg.to_dict())
    assert again == cfg
    with pytest.raises(ValueError, match="does not have the fields: bogus"):
        ConformerConfig.from_dict({**cfg.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="not divisible"):
        dataclasses.replace(cfg, encoder_heads=3)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        dataclasses.replace(cfg, blank_id=30)


@pytest.mark.parametrize("overrides", [
    {},
    {"decoder": "transformer", "cnn_module_norm": "layer_norm", "causal": True,
     "cnn_module_kernel": 4},
    {"input_layer": "conv2d6", "macaron_style": False, "conv_bias": False},
    {"input_layer": "conv2d8", "use_cnn_module": False, "global_cmvn": False,
     "r_decoder_layers": 2},
])
def test_model_state_dict_is_exactly_the_declared_contract(overrides):
    from oasr.models.conformer.model import ConformerModel

    base = dict(input_dim=40, vocab_size=11, d_model=8, encoder_layers=2, encoder_heads=2,
                encoder_linear_units=12, cnn_module_kernel=3, decoder_layers=1,
                decoder_heads=2, decoder_linear_units=12)
    cfg = ConformerConfig(**{**base, **overrides})
    got = {k: tuple(v.shape) for k, v in ConformerModel(cfg).state_dict().items()}
    assert got == cfg.parameter_shapes()


# -- weights -------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_load_report_maps_every_weight_and_drops_only_non_weights(variant):
    conv = WenetConformerConverter()
    folder = fixture_dir(variant)
    cfg = conv.build_config(folder)
    tensors, report = conv.load_checked(folder, cfg)
    assert report.ok and not report.missing
    assert set(tensors) == set(cfg.parameter_shapes())
    raw = torch.load(folder / "final.pt", weights_only=True)
    assert set(report.mapped) | set(report.dropped) == set(raw)
    assert all(k.endswith("num_batches_tracked") for k in report.dropped)
    assert len(report.dropped) == (cfg.encoder_layers
                                   if cfg.cnn_module_norm == "batch_norm" else 0)


def test_position_tables_in_newer_checkpoints_are_dropped(tmp_path):
    folder = _copy("u2pp_conv2d4", tmp_path)
    tables = ("encoder.embed.pos_enc.pe", "decoder.left_decoder.embed.1.pe",
              "decoder.right_decoder.embed.1.pe")
    _edit_checkpoint(folder, lambda sd: sd.update({k: torch.zeros(1, 5000, 32) for k in tables}))
    conv = WenetConformerConverter()
    _, report = conv.load_checked(folder, conv.build_config(folder))
    assert report.ok
    for key in tables:
        assert report.dropped[key] == "sinusoidal position table (recomputed)"


def test_unknown_or_missing_weights_are_refused(tmp_path):
    conv = WenetConformerConverter()
    folder = _copy("u2pp_conv2d4", tmp_path)
    _edit_checkpoint(folder, lambda sd: sd.update({"encoder.lora_A.weight": torch.zeros(2)}))
    with pytest.raises(IncompleteCheckpointError, match="encoder.lora_A.weight"):
        conv.load_checked(folder, conv.build_config(folder))
    _edit_checkpoint(folder, lambda sd: (sd.pop("encoder.lora_A.weight"),
                                         sd.pop("ctc.ctc_lo.bias")))
    with pytest.raises(IncompleteCheckpointError, match="ctc.ctc_lo.bias"):
        conv.load_checked(folder, conv.build_config(folder))


def test_checkpoint_name_picks_another_state_dict(tmp_path):
    folder = _copy("u2pp_conv2d4", tmp_path)
    (folder / "final.pt").rename(folder / "avg_5.pt")
    default = WenetConformerConverter()
    assert default.detect(folder)
    with pytest.raises(FileNotFoundError, match=r"no final.pt \(checkpoints there: avg_5.pt\)"):
        default.load_checked(folder, default.build_config(folder))
    chosen = WenetConformerConverter(checkpoint_name="avg_5.pt")
    tensors, report = chosen.load_checked(folder, chosen.build_config(folder))
    assert report.ok
    raw = torch.load(fixture_dir("u2pp_conv2d4") / "final.pt", weights_only=True)
    assert torch.equal(tensors["ctc.ctc_lo.weight"], raw["ctc.ctc_lo.weight"])


def test_checkpoint_without_cmvn_buffers_uses_the_stats_file(tmp_path):
    conv = WenetConformerConverter()
    folder = _copy("u2pp_conv2d4", tmp_path)
    raw = torch.load(folder / "final.pt", weights_only=True)
    _edit_checkpoint(folder, lambda sd: (sd.pop("encoder.global_cmvn.mean"),
                                         sd.pop("encoder.global_cmvn.istd")))
    cfg = conv.build_config(folder)
    tensors, report = conv.load_checked(folder, cfg)
    assert report.mapped["encoder.global_cmvn.mean"].endswith("global_cmvn")
    # WeNet filled its buffers from the same file.
    for key in ("encoder.global_cmvn.mean", "encoder.global_cmvn.istd"):
        torch.testing.assert_close(tensors[key], raw[key], atol=1e-5, rtol=1e-5)


def test_cmvn_reader_that_fails_to_import_raises_naming_the_fix(tmp_path, monkeypatch):
    import sys

    conv = WenetConformerConverter()
    folder = _copy("u2pp_conv2d4", tmp_path)
    _edit_checkpoint(folder, lambda sd: (sd.pop("encoder.global_cmvn.mean"),
                                         sd.pop("encoder.global_cmvn.istd")))
    cfg = conv.build_config(folder)
    monkeypatch.setitem(sys.modules, "oasr.features.cmvn", None)  # import now fails
    with pytest.raises(ImportError, match="global CMVN stats .*global_cmvn.*reinstall"):
        conv.load_checked(folder, cfg)


@pytest.mark.parametrize("text", ["encoder: [conformer\n", "- a list\n- not a mapping\n"])
def test_corrupt_train_yaml_is_an_error_naming_the_file(tmp_path, text):
    from oasr.models.converter import CorruptCheckpointFileError

    folder = _copy("u2pp_conv2d4", tmp_path)
    (folder / "train.yaml").write_text(text)
    for call in (WenetConformerConverter().detect, WenetConformerConverter().build_config):
        with pytest.raises(CorruptCheckpointFileError, match=r"train\.yaml"):
            call(folder)
    (folder / "train.yaml").unlink()
    assert not WenetConformerConverter().detect(folder)  # absent is not corrupt


# -- bundles -------------------------------------------------------------------------------
def test_convert_writes_a_bundle_that_loads_back(tmp_path):
    from oasr.models.loader import ensure_bundle, load_pretrained

    conv = WenetConformerConverter()
    dst = tmp_path / "bundle"
    report = conv.convert(U2PP, dst)
    assert report.ok
    bundle = read_bundle(dst)
    assert bundle.architecture == "conformer"
    assert bundle.build_model_config() == conv.build_config(U2PP)
    assert bundle.provenance["source_format"] == "wenet"
    assert bundle.decoding_defaults == {"rescoring_reverse_weight": 0.3}
    assert bundle.tokenizer_spec.kind == "symbol_table"
    assert bundle.tokenizer_spec.files == {"units": "units.txt"}
    assert (bundle.tokenizer_dir / "units.txt").read_text() == (U2PP / "units.txt").read_text()
    feats = bundle.build_feature_config()
    assert (feats.feature_type, feats.sample_rate, feats.num_mel_bins) == ("fbank", 16000, 80)
    assert (feats.frame_shift_ms, feats.frame_length_ms) == (10, 25)
    # the bundle records every fbank option (FeatureConfig.complete), WeNet's two set
    assert feats.params == {**FBANK_DEFAULTS, "audio_scale": 32768.0, "dither": 0.0}

    # The loader path: a WeNet folder converts once into the cache and loads from there.
    cached = ensure_bundle(str(U2PP), cache_dir=tmp_path / "cache")
    assert cached.architecture == "conformer"
    assert cached.provenance["weights_sha256"] == bundle.provenance["weights_sha256"]
    loaded = load_pretrained(str(dst))
    assert loaded.architecture == "conformer"
    assert loaded.tokenizer.decode([2, 3, 29]) == "ab"  # <sos/eos> renders as nothing
    ref = reference("u2pp_conv2d4")
    with torch.no_grad():
        log_probs, lens = loaded.model.forward_offline(ref["features"], ref["lengths"])
    for b, n in enumerate(lens.tolist()):
        torch.testing.assert_close(log_probs[b, :n], ref["ctc_log_probs"][b, :n], atol=1e-5,
                                   rtol=0)


def test_convert_cli_checkpoint_name_and_decoding_defaults_reach_the_family(tmp_path):
    from typer.testing import CliRunner

    from oasr.cli.app import app
    from oasr.engine.config import EngineConfig
    from oasr.engine.engine import ASREngine
    from oasr.models.loader import load_pretrained

    src = tmp_path / "wenet"
    shutil.copytree(fixture_dir("u2pp_conv2d4"), src)
    (src / "final.pt").rename(src / "avg_3.pt")
    runner = CliRunner()
    refused = runner.invoke(app, ["convert", str(src), str(tmp_path / "b0")])
    assert refused.exit_code != 0 and "avg_3.pt" in refused.output
    missing = runner.invoke(app, ["convert", str(src), str(tmp_path / "b1"),
                                  "--checkpoint-name", "avg_9.pt"])
    assert missing.exit_code == 2 and "avg_9.pt does not exist" in missing.output
    ok = runner.invoke(app, ["convert", str(src), str(tmp_path / "b2"),
                             "--checkpoint-name", "avg_3.pt"])
    assert ok.exit_code == 0, ok.output

    loaded = load_pretrained(str(tmp_path / "b2"))
    assert loaded.decoding_defaults["rescoring_reverse_weight"] == pytest.approx(0.3)
    engine = ASREngine(EngineConfig(device="cpu", decode_method="ctc_aed_rescoring"), loaded)
    assert engine.strategy.options.rescoring_reverse_weight == pytest.approx(0.3)
    engine = ASREngine(EngineConfig(device="cpu", decode_method="ctc_aed_rescoring",
                                    decode_options={"rescoring_reverse_weight": 0.0}), loaded)
    assert engine.strategy.options.rescoring_reverse_weight == 0.0  # the user's wins
    assert ASREngine(EngineConfig(device="cpu"), loaded).decode_method == "ctc"


def test_unk_prints_as_wenet_prints_it():
    from oasr.tokenizers import build_tokenizer

    folder = fixture_dir("u2pp_conv2d4")
    tok = build_tokenizer(WenetConformerConverter().build_tokenizer_spec(folder), folder)
    # WeNet's CharTokenizer joins the units' text: "<unk>" stays in the transcript.
    assert tok.decode([2, 1, 3]) == "a<unk>b"


def test_a_window_other_than_povey_is_refused(tmp_path):
    folder = _copy("u2pp_conv2d4", tmp_path)
    _edit_yaml(folder, lambda c: c["dataset_conf"]["fbank_conf"].update(window_type="hamming"))
    with pytest.raises(ValueError, match="window_type='hamming'"):
        WenetConformerConverter().build_config(folder)


@pytest.mark.parametrize(("variant", "options", "message"), [
    ("conv2d6_static_chunk", {"chunk_size": 4}, "static chunk of 3 frames"),
    ("u2pp_conv2d4", {"chunk_size": 4, "left_context_frames": 6}, "whole number of 4-frame"),
    ("u2pp_conv2d4", {"left_context_frames": 8}, "needs chunk_size"),
    ("u2pp_conv2d4", {"chunk_size": 0}, "positive number"),
])
def test_chunked_decoding_options_wenet_would_not_take_are_refused(variant, options, message):
    from oasr.models.conformer.model import ConformerModel

    model = ConformerModel(WenetConformerConverter().build_config(fixture_dir(variant)))
    with pytest.raises(ValueError, match=message):
        model.configure_chunks(**options)


def test_a_model_trained_without_chunks_has_no_chunked_mode(tmp_path):
    from oasr.models.conformer.model import ConformerModel

    folder = _copy("u2pp_conv2d4", tmp_path)
    _edit_yaml(folder, lambda c: c["encoder_conf"].update(use_dynamic_chunk=False))
    model = ConformerModel(WenetConformerConverter().build_config(folder))
    model.configure_chunks()  # nothing asked: fine
    with pytest.raises(ValueError, match="chunk_size: this Conformer was trained without"):
        model.configure_chunks(chunk_size=4)


def test_a_cached_conversion_is_found_without_detecting_the_format(tmp_path, monkeypatch):
    from oasr.models import loader
    from oasr.registry import UnknownNameError

    first = loader.ensure_bundle(str(U2PP), cache_dir=tmp_path / "cache")

    def no_detection(*args, **kwargs):
        raise AssertionError("a cached bundle needs no converter")

    with monkeypatch.context() as m:
        m.setattr(loader, "detect_converter", no_detection)
        again = loader.ensure_bundle(str(U2PP), cache_dir=tmp_path / "cache")
        again_named = loader.ensure_bundle(str(U2PP), "conformer", cache_dir=tmp_path / "cache")
    assert again.path == first.path == again_named.path
    # Another architecture asked of the same folder is still detected (and refused) as before.
    with pytest.raises(UnknownNameError):
        loader.ensure_bundle(str(U2PP), "no-such-architecture", cache_dir=tmp_path / "cache")
