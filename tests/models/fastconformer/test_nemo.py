"""NeMo ``.nemo`` checkpoints: a tar built here from transformers' tiny random weights under
NeMo's key names (renamed by a table written from NeMo's module names, independently of the
converter's), converted, and checked equal to the transformers folder's conversion."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest
import torch
import yaml

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.23'")
if not hasattr(tf, "ParakeetForTDT"):
    pytest.skip("transformers has no ParakeetForTDT (>= 5.23)", allow_module_level=True)

from oasr.models.fastconformer.nemo import NemoCtcConverter, NemoTdtConverter  # noqa: E402
from oasr.models.registry import detect_converter  # noqa: E402
from tests.models.fastconformer.hf_tiny import ENCODER, VOCAB, save_hf  # noqa: E402

# transformers -> NeMo, the inverse of transformers' own conversion table.
_HF_TO_NEMO = (
    (r"^encoder\.subsampling\.layers\.", "encoder.pre_encode.conv."),
    (r"^encoder\.subsampling\.linear\.", "encoder.pre_encode.out."),
    (r"\.conv\.norm\.", ".conv.batch_norm."),
    (r"^ctc_head\.", "decoder.decoder_layers.0."),
    (r"^decoder\.embedding\.", "decoder.prediction.embed."),
    (r"^decoder\.lstm\.", "decoder.prediction.dec_rnn.lstm."),
    (r"^encoder_projector\.", "joint.enc."),
    (r"^decoder\.decoder_projector\.", "joint.pred."),
    (r"^joint\.head\.", "joint.joint_net.2."),
    (r"\.q_proj\.", ".linear_q."), (r"\.k_proj\.", ".linear_k."), (r"\.v_proj\.", ".linear_v."),
    (r"\.o_proj\.", ".linear_out."), (r"\.relative_k_proj\.", ".linear_pos."),
    (r"\.bias_([uv])$", r".pos_bias_\1"),
)


def _nemo_state(hf: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, t in hf.state_dict().items():
        for pat, rep in _HF_TO_NEMO:
            name = re.sub(pat, rep, name)
        out[name] = t.clone()
    out["preprocessor.featurizer.window"] = torch.hann_window(400)
    return out


def _spm(folder: Path, size: int) -> Path:
    import sentencepiece as spm

    text = folder / "text.txt"
    text.write_text("\n".join(f"w{i % 7} x{i % 5} y{i % 3}" for i in range(200)))
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / "abc_tokenizer"),
                                   vocab_size=size, model_type="word", minloglevel=2,
                                   hard_vocab_limit=False)
    return folder / "abc_tokenizer.model"


def write_nemo(path: Path, hf: torch.nn.Module, head: str) -> Path:
    enc = {"_target_": "nemo.collections.asr.modules.ConformerEncoder",
           "feat_in": ENCODER["num_mel_bins"], "n_layers": ENCODER["num_hidden_layers"],
           "d_model": ENCODER["hidden_size"], "n_heads": ENCODER["num_attention_heads"],
           "ff_expansion_factor": ENCODER["intermediate_size"] / ENCODER["hidden_size"],
           "conv_kernel_size": ENCODER["conv_kernel_size"], "subsampling": "dw_striding",
           "subsampling_factor": 8, "subsampling_conv_channels": 8, "xscaling": True,
           "self_attention_model": "rel_pos", "att_context_size": [-1, -1], "use_bias": True}
    labels = [f"u{i}" for i in range(VOCAB - 1)]
    cfg = {"labels": labels, "encoder": enc, "preprocessor": {
        "sample_rate": 16000, "window_size": 0.025, "window_stride": 0.01, "n_fft": 512,
        "features": ENCODER["num_mel_bins"], "normalize": "per_feature", "window": "hann"},
        "tokenizer": {"model": "nemo:abc_tokenizer.model"}}
    if head == "ctc":
        cfg["decoder"] = {"num_classes": VOCAB - 1, "vocabulary": labels}
    else:
        cfg["decoder"] = {"prednet": {"pred_hidden": 24, "pred_rnn_layers": 2}}
        cfg["joint"] = {"jointnet": {"joint_hidden": 24, "activation": "relu"}}
        cfg["model_defaults"] = {"tdt_durations": [0, 1, 2, 3, 4]}
        cfg["loss"] = {"loss_name": "tdt"}
    buf = io.BytesIO()
    torch.save(_nemo_state(hf), buf)
    spm_model = _spm(path.parent, 16)
    with tarfile.open(path, "w") as tar:
        for name, data in (("./model_config.yaml", yaml.safe_dump(cfg).encode()),
                           ("./model_weights.ckpt", buf.getvalue()),
                           ("./abc_tokenizer.model", spm_model.read_bytes())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("head", ["ctc", "tdt"])
def test_nemo_converts_to_the_transformers_weights(head: str, tmp_path: Path) -> None:
    hf = save_hf(head, tmp_path / "hf")
    nemo = write_nemo(tmp_path / "tiny.nemo", hf, head)
    conv = detect_converter(nemo)
    assert type(conv) is {"ctc": NemoCtcConverter, "tdt": NemoTdtConverter}[head]
    cfg = conv.build_config(nemo)
    ours = conv.load_state_dict(nemo, cfg)
    ref_conv = detect_converter(tmp_path / "hf")
    ref_cfg = ref_conv.build_config(tmp_path / "hf")
    for field in ("d_model", "layers", "heads", "ff_dim", "vocab_size", "blank_id",
                  "durations", "pred_hidden"):
        assert getattr(cfg, field) == getattr(ref_cfg, field), field
    ref = ref_conv.load_state_dict(tmp_path / "hf", ref_cfg)
    assert ours.keys() == ref.keys()
    for k in ref:
        assert torch.equal(ours[k], ref[k]), k


def test_nemo_bundle_carries_the_sentencepiece_tokenizer(tmp_path: Path) -> None:
    from oasr.models.bundle import read_bundle

    hf = save_hf("tdt", tmp_path / "hf")
    nemo = write_nemo(tmp_path / "tiny.nemo", hf, "tdt")
    NemoTdtConverter().convert(nemo, tmp_path / "bundle")
    bundle = read_bundle(tmp_path / "bundle")
    assert bundle.tokenizer_spec.kind == "sentencepiece"
    feats = bundle.build_feature_config()
    assert (feats.feature_type, feats.num_mel_bins) == ("parakeet_logmel", ENCODER["num_mel_bins"])
    assert (tmp_path / "bundle" / "tokenizer" / "abc_tokenizer.model").is_file()


def test_refuses_limited_context_attention(tmp_path: Path) -> None:
    hf = save_hf("tdt", tmp_path / "hf")
    nemo = write_nemo(tmp_path / "tiny.nemo", hf, "tdt")
    folder = tmp_path / "x"
    folder.mkdir()
    with tarfile.open(nemo) as tar:
        tar.extractall(folder, filter="data")
    cfg = yaml.safe_load((folder / "model_config.yaml").read_text())
    cfg["encoder"]["att_context_size"] = [70, 13]
    (folder / "model_config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match="att_context_size"):
        NemoTdtConverter().build_config(folder)


def test_a_nemo_file_is_a_source_for_convert_transcribe_and_load(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """``oasr convert X.nemo``, ``oasr transcribe --model X.nemo`` and ``oasr.load("X.nemo")``
    take the file itself; the texts equal those of the bundle converted from it, and the
    members unpacked for the conversion are gone afterwards."""
    import json
    import tempfile

    import numpy as np
    import soundfile as sf
    from typer.testing import CliRunner

    import oasr
    from oasr.cli.app import app

    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    hf = save_hf("tdt", tmp_path / "hf", blank_bias=0.0)
    nemo = write_nemo(tmp_path / "tiny.nemo", hf, "tdt")
    wav = tmp_path / "in.wav"
    sf.write(wav, np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1,
             16000)
    runner = CliRunner()

    res = runner.invoke(app, ["convert", str(nemo), str(tmp_path / "bundle")])
    assert res.exit_code == 0, res.output
    assert "format: nemo (architecture parakeet_tdt)" in res.output
    assert not list((tmp_path / "tmp").iterdir())

    texts = {}
    for name, model in (("nemo", nemo), ("bundle", tmp_path / "bundle")):
        out = tmp_path / f"{name}.jsonl"
        res = runner.invoke(app, ["transcribe", str(wav), "--model", str(model), "-o", str(out),
                                  "--device", "cpu"])
        assert res.exit_code == 0, res.output
        row = json.loads(out.read_text().splitlines()[0])
        assert not row.get("error"), row
        texts[name] = row["text"]
    assert texts["nemo"] == texts["bundle"] and texts["nemo"]
    assert not list((tmp_path / "tmp").iterdir())

    model = oasr.load(str(nemo), device="cpu")
    assert model.transcript(str(wav)).text == texts["nemo"]
