"""``oasr convert`` + ``oasr transcribe --model BUNDLE`` for a tiny random Nemotron streaming
checkpoint on real LibriSpeech audio: the text equals transformers' offline ``generate`` (its
own feature extractor), decoded by the same tokenizer; ``language`` is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.24'")
if not hasattr(tf, "NemotronAsrStreamingForRNNT"):
    pytest.skip("transformers has no NemotronAsrStreamingForRNNT; pip install "
                "'transformers>=5.24'", allow_module_level=True)

from oasr.cli.app import app  # noqa: E402
from tests.helpers.data import SHARED_DATA  # noqa: E402
from tests.models.fastconformer.reference import hf_hypotheses  # noqa: E402
from tests.models.nemotron_streaming.hf_tiny import VOCAB, save_hf  # noqa: E402

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
CLIP = "1688-142285-0002"
BLANK = VOCAB - 1
runner = CliRunner()


def test_convert_and_transcribe_match_transformers(tmp_path: Path) -> None:
    if not AUDIO.is_dir():
        pytest.skip(f"{AUDIO} (LibriSpeech test-other clips) is not on this machine")
    from tokenizers import Tokenizer

    src = tmp_path / "hf"
    hf = save_hf(src, blank_bias=0.0)
    bundle = tmp_path / "bundle"
    res = runner.invoke(app, ["convert", str(src), str(bundle)])
    assert res.exit_code == 0, res.output
    assert "nemotron_streaming/huggingface" in res.output
    clip = AUDIO / f"{CLIP}.flac"
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["transcribe", str(clip), "--model", str(bundle),
                              "--no-progress", "-o", str(out)])
    assert res.exit_code == 0, res.output
    row = json.loads(out.read_text().splitlines()[0])
    wav = sf.read(str(clip), dtype="float32")[0]
    fe = tf.NemotronAsrStreamingFeatureExtractor(feature_size=16)
    inputs = fe(wav, sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        gen = hf.generate(inputs.input_features, attention_mask=inputs.attention_mask.long(),
                          decoder_start_token_id=BLANK, num_lookahead_tokens=1,
                          max_new_tokens=6000)
        enc_lens = hf.encoder._get_subsampling_output_length(inputs.attention_mask.sum(-1))
    ids = hf_hypotheses(gen, enc_lens, BLANK)[0][0]
    assert ids
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    assert row["text"] == tok.decode(ids).strip()
    res = runner.invoke(app, ["transcribe", str(clip), "--model", str(bundle),
                              "--no-progress", "--language", "en", "-o", str(tmp_path / "l")])
    assert res.exit_code != 0
    assert "language" in res.output + str(res.exception)
