"""icefall layouts as they ship (``layout.py``) and what the converter reads from them
(``checkpoint.py``): the checkpoint and tokenizer it picks, the training params, the notes
for what it had to assume, and the bundles it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from oasr.models.zipformer.checkpoint import IcefallZipformerConverter, decode_chunks
from oasr.models.zipformer.config import ZipformerConfig
from oasr.models.zipformer.layout import LayoutError, find_layout

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "icefall_zipformer"


def test_recipe_folder_exp_folder_and_egs_tree() -> None:
    root = FIXTURES / "noncausal_export_bpe"
    for path in (root, root / "exp"):
        layout = find_layout(path)
        assert layout is not None
        assert (layout.root, layout.checkpoint) == (root, root / "exp" / "pretrained.pt")
        assert layout.tokenizer.kind == "sentencepiece"  # decode.py's sp.decode
        assert layout.tokenizer.files == {"model": "data/lang_bpe_100/bpe.model"}
    tokens = find_layout(FIXTURES / "noncausal_train_tokens")
    assert tokens.checkpoint.name == "epoch-3.pt"
    assert tokens.tokenizer.kind == "symbol_table"  # pretrained.py's join, <unk> printed
    assert set(tokens.tokenizer.options["literal_units"]) == {"<blk>", "<unk>", "<sos/eos>"}
    asr = FIXTURES / "ctc_train_nested" / "egs" / "librispeech" / "ASR"
    for path in (asr, asr / "zipformer", asr / "zipformer" / "exp"):
        layout = find_layout(path)
        assert layout.root == asr and layout.checkpoint == asr / "zipformer/exp/epoch-2.pt"
    assert find_layout(FIXTURES) is None  # no checkpoint beside a tokenizer
    assert find_layout(root / "exp" / "pretrained.pt") is None  # a file: the CLI splits it


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("expected.json"))
    return dst


def test_which_checkpoint_and_which_tokenizer(tmp_path) -> None:
    root = _copy(FIXTURES / "noncausal_export_bpe", tmp_path / "recipe")
    ckpt = root / "exp" / "pretrained.pt"
    for name in ("epoch-9.pt", "epoch-30.pt", "epoch-12-avg-4.pt"):
        shutil.copy(ckpt, root / "exp" / name)
    layout = find_layout(root)
    assert layout.checkpoint == ckpt  # export.py's file first
    assert layout.others == ("epoch-12-avg-4.pt", "epoch-30.pt", "epoch-9.pt")
    ckpt.unlink()
    assert find_layout(root).checkpoint.name == "epoch-12-avg-4.pt"  # averaged, then newest
    assert find_layout(root, "epoch-9.pt").checkpoint.name == "epoch-9.pt"
    # Another lang folder: the one whose vocabulary is the checkpoint's is read.
    other = root / "data" / "lang_char"
    other.mkdir()
    (other / "tokens.txt").write_text("<blk> 0\n<unk> 1\na 2\n", encoding="utf-8")
    assert find_layout(root).tokenizer.files["model"] == "data/lang_bpe_100/bpe.model"
    shutil.copytree(root / "data" / "lang_bpe_100", root / "data" / "lang_bpe_100b")
    with pytest.raises(LayoutError, match="several.*lang_bpe_100b"):
        find_layout(root)


def test_training_params_are_read_and_gaps_noted(tmp_path) -> None:
    conv = IcefallZipformerConverter()
    cfg = conv.build_config(FIXTURES / "noncausal_train_tokens")
    # non-default head split, read from the checkpoint's params (shapes alone would guess wrong)
    assert cfg.pos_head_dim == (2,) * 4 and cfg.query_head_dim == (6,) * 4
    assert cfg.num_encoder_layers == (2, 1, 2, 1) and cfg.use_ctc is False
    notes = conv.conversion_notes(FIXTURES / "noncausal_train_tokens", cfg)
    assert not any("pos_head_dim" in n or "feature_dim" in n for n in notes)

    export = FIXTURES / "noncausal_export_bpe"
    notes = conv.conversion_notes(export, conv.build_config(export))
    assert any("pos_head_dim=4" in n for n in notes) and any("feature_dim=80" in n for n in notes)

    causal = FIXTURES / "causal_train_bpe"
    cfg = conv.build_config(causal)
    assert cfg.causal and (cfg.decode_chunk_size, cfg.decode_left_context_frames) == (16, 128)
    notes = conv.conversion_notes(causal, cfg)
    assert any("decode_chunk_size=16" in n and "16,32,64,-1" in n for n in notes)

    # pretrained.pt keeps no params: the chunk comes from --params, else icefall's 16 / 128
    bare = FIXTURES / "causal_export_params"
    cfg = conv.build_config(bare)
    assert (cfg.decode_chunk_size, cfg.decode_left_context_frames) == (16, 128)
    assert any("no chunk_size in the checkpoint" in n for n in conv.conversion_notes(bare, cfg))
    given = IcefallZipformerConverter(params_file=str(bare / "train_args.json"))
    cfg = given.build_config(bare)
    assert (cfg.decode_chunk_size, cfg.decode_left_context_frames) == (32, 64)
    assert not any("decode_" in n for n in given.conversion_notes(bare, cfg))


def test_params_that_contradict_the_checkpoint_are_refused(tmp_path) -> None:
    bad = tmp_path / "args.json"
    bad.write_text(json.dumps({"causal": False}), encoding="utf-8")
    conv = IcefallZipformerConverter(params_file=str(bad))
    with pytest.raises(ValueError, match="causal=False.*chunk-causal"):
        conv.build_config(FIXTURES / "causal_export_params")
    bad.write_text(json.dumps({"feature_dim": 40}), encoding="utf-8")
    with pytest.raises(ValueError, match="feature_dim=40"):
        conv.build_config(FIXTURES / "noncausal_export_bpe")
    bad.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="not an object"):
        conv.build_config(FIXTURES / "noncausal_export_bpe")


def test_decode_chunks_from_params() -> None:
    assert decode_chunks({"chunk_size": "32", "left_context_frames": "256"})[:2] == (32, 256)
    assert decode_chunks({"decode_chunk_size": 64, "chunk_size": "16,32"})[:2] == (64, 128)
    chunk, left, notes = decode_chunks({"chunk_size": "-1", "left_context_frames": "-1"})
    assert (chunk, left) == (16, 128) and len(notes) == 2


def test_front_end_is_lhotse_fbank() -> None:
    conv = IcefallZipformerConverter()
    cfg = conv.build_config(FIXTURES / "ctc_train_nested" / "egs" / "librispeech" / "ASR")
    feats = conv.build_feature_config(cfg)
    assert cfg.feature_dim == 64 and feats.num_mel_bins == 64
    assert feats.params["snip_edges"] is False and feats.params["high_freq"] == -400.0
    assert conv.build_decoding_defaults(cfg, Path(".")) == {"beam_size": 1}  # CTC best path


def test_old_bundles_are_refused_naming_the_fix() -> None:
    old = ZipformerConfig().to_dict()
    del old["decode_tail_pad_frames"]
    with pytest.raises(ValueError, match="convert the icefall checkpoint again"):
        ZipformerConfig.from_dict(old)
    assert ZipformerConfig.from_dict(ZipformerConfig().to_dict()) == ZipformerConfig()


def test_chunk_options_reach_only_causal_checkpoints() -> None:
    from oasr.engine.decode.registry import build_decode_strategy
    from oasr.models.zipformer.model import ZipformerModel
    from tests.models.zipformer.test_encoder_parity import TINY

    causal = ZipformerModel(ZipformerConfig(**TINY, causal=True, use_ctc=True,
                                            vocab_size=13, decoder_dim=8, joiner_dim=8))
    build_decode_strategy("ctc", causal, {"chunk_size": "8", "left_context_frames": "32"})
    assert (causal.encoder.chunk_size, causal.encoder.left_context_frames) == (8, 32)
    assert causal.encoder.streaming.chunk_size == 8
    build_decode_strategy("ctc", causal, {})  # unset: the checkpoint's values again
    assert (causal.encoder.chunk_size, causal.encoder.left_context_frames) == (16, 128)
    build_decode_strategy("transducer", causal, {"chunk_size": "-1"})
    assert causal.encoder.chunk_size == -1
    with pytest.raises(ValueError, match="streaming needs both positive"):
        causal.encoder.streaming_geometry(4)
    with pytest.raises(ValueError, match="multiple of every downsampling factor"):
        build_decode_strategy("ctc", causal, {"chunk_size": "6"})
    offline = ZipformerModel(ZipformerConfig(**TINY, use_ctc=True, vocab_size=13,
                                             decoder_dim=8, joiner_dim=8))
    with pytest.raises(ValueError, match="not causal"):
        build_decode_strategy("ctc", offline, {"chunk_size": "16"})
    build_decode_strategy("ctc", offline, {})


def test_a_model_without_chunks_refuses_the_options() -> None:
    from oasr.engine.decode.encoder_chunks import configure_encoder_chunks
    from oasr.engine.decode.transducer import TransducerOptions

    with pytest.raises(ValueError, match="left_context_frames: Module has no chunked"):
        configure_encoder_chunks(torch.nn.Module(), TransducerOptions(left_context_frames=64))
    configure_encoder_chunks(torch.nn.Module(), TransducerOptions())
