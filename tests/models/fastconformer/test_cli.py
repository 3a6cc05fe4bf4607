"""``oasr convert`` + ``oasr transcribe --model BUNDLE`` for Parakeet CTC and TDT: the texts
equal transformers' ``generate`` on the same audio (its own feature extractor), decoded by the
same tokenizer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.23'")
if not hasattr(tf, "ParakeetForTDT"):
    pytest.skip("transformers has no ParakeetForTDT; pip install 'transformers>=5.23'",
                allow_module_level=True)

from oasr.cli.app import app  # noqa: E402
from tests.helpers.data import SHARED_DATA  # noqa: E402
from tests.models.fastconformer.hf_tiny import VOCAB, save_hf  # noqa: E402
from tests.models.fastconformer.reference import hf_hypotheses  # noqa: E402

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
CLIPS = ("1688-142285-0002", "1688-142285-0003")
BLANK = VOCAB - 1
runner = CliRunner()


def _reference_ids(kind: str, hf: torch.nn.Module, wavs: list) -> list[list[int]]:
    fe = tf.ParakeetFeatureExtractor(feature_size=16)
    inputs = fe(wavs, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        if kind == "ctc":
            seqs = hf.generate(inputs.input_features, attention_mask=inputs.attention_mask)
            enc_mask = hf._get_output_attention_mask(inputs.attention_mask,
                                                     target_length=seqs.shape[1])
            out = []
            for row, keep in zip(seqs.tolist(), enc_mask.tolist()):
                frames = [t for t, k in zip(row, keep) if k]
                out.append([t for t, _ in itertools.groupby(frames) if t != BLANK])
            return out
        gen = hf.generate(inputs.input_features, attention_mask=inputs.attention_mask,
                          decoder_start_token_id=BLANK, max_new_tokens=4000)
        enc_lens = hf.encoder._get_subsampling_output_length(inputs.attention_mask.sum(-1))
    return [toks for toks, _ in hf_hypotheses(gen, enc_lens, BLANK)]


@pytest.mark.parametrize("kind", ["ctc", "rnnt", "tdt"])
def test_convert_and_transcribe_match_transformers(kind: str, tmp_path: Path) -> None:
    if not AUDIO.is_dir():
        pytest.skip(f"{AUDIO} (LibriSpeech test-other clips) is not on this machine")
    from tokenizers import Tokenizer

    src = tmp_path / "hf"
    hf = save_hf(kind, src, blank_bias=0.0)
    bundle = tmp_path / "bundle"
    res = runner.invoke(app, ["convert", str(src), str(bundle)])
    assert res.exit_code == 0, res.output
    assert f"parakeet_{kind}/huggingface" in res.output
    clips = [AUDIO / f"{c}.flac" for c in CLIPS]
    out = tmp_path / "out.jsonl"
    res = runner.invoke(app, ["transcribe", *map(str, clips), "--model", str(bundle),
                              "--no-progress", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    wavs = [sf.read(str(c), dtype="float32")[0] for c in clips]
    ref = _reference_ids(kind, hf, wavs)
    assert any(ref)
    for clip, ids in zip(CLIPS, ref):
        assert rows[clip]["text"] == tok.decode(ids).strip()
        words = rows[clip]["words"]
        assert [w["word"] for w in words] == tok.decode(ids).split()
        assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))
