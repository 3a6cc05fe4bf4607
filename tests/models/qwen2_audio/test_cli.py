"""``oasr convert`` + ``oasr transcribe --model BUNDLE`` on a real LibriSpeech flac, with a
tiny random Qwen2-Audio (a full 30 s window), against transformers' greedy ``generate`` on
transformers' own log-mel features of the same audio."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.engine.config import DEFAULT_MAX_NEW_TOKENS
from oasr.engine.decode.llm import build_prompts
from oasr.models.loader import load_pretrained
from tests.helpers.data import SHARED_DATA
from tests.helpers.tiny_whisper import torch_threads
from tests.models.qwen2_audio.checkpoint import N_MELS, make_checkpoint

FLAC = SHARED_DATA / "librispeech-test-other-70" / "audio" / "1688-142285-0002.flac"
MAX_NEW = DEFAULT_MAX_NEW_TOKENS  # the engine's cap (transcribe has no flag for it)


@pytest.mark.skipif(not FLAC.is_file(), reason=f"needs {FLAC}")
def test_convert_and_transcribe_match_transformers(tmp_path):
    transformers = pytest.importorskip("transformers", reason="pip install 'transformers>=5'")
    with torch_threads(1):
        hf = make_checkpoint(tmp_path / "hf", source_positions=1500)
        runner = CliRunner()
        res = runner.invoke(app, ["convert", str(tmp_path / "hf"), str(tmp_path / "bundle")])
        assert res.exit_code == 0, res.output
        out = tmp_path / "out.jsonl"
        res = runner.invoke(app, ["transcribe", str(FLAC), "--model", str(tmp_path / "bundle"),
                                  "-o", str(out), "--no-progress", "-d", "llm_prompt=t7 t8 t9"])
        assert res.exit_code == 0, res.output
        row = json.loads(out.read_text().splitlines()[0])

        audio, sr = sf.read(FLAC, dtype="float32")
        fe = transformers.WhisperFeatureExtractor(feature_size=N_MELS)
        feats = fe(audio, sampling_rate=sr, return_attention_mask=True, return_tensors="pt")
        frames = int(feats["attention_mask"].sum())
        loaded = load_pretrained(str(tmp_path / "bundle"))
        cfg, tok = loaded.model.config, loaded.tokenizer
        n_audio = ((frames - 1) // 2 + 1 - 2) // 2 + 1
        before, after = cfg.render_prompt("t7 t8 t9")
        batch = build_prompts([tok.encode(before)], [tok.encode(after)], [n_audio],
                              cfg.audio_frames, cfg.audio_token_id, cfg.pad_token_id)
        with torch.no_grad():
            gen = hf.generate(input_ids=batch.ids, attention_mask=torch.ones_like(batch.ids),
                              input_features=feats["input_features"],
                              feature_attention_mask=feats["attention_mask"],
                              max_new_tokens=MAX_NEW, do_sample=False,
                              eos_token_id=cfg.eos_token_ids, pad_token_id=cfg.pad_token_id)
        ref = gen[0, batch.ids.shape[1]:].tolist()
        stop = next((k for k, t in enumerate(ref) if t in cfg.eos_token_ids), None)
        expect = ref if stop is None else ref[:stop]
        assert expect, "transformers generated nothing to compare"
        assert row["error"] is None
        assert row["text"] == tok.decode(expect).strip()
        assert row["finish_reason"] == ("length" if stop is None else "stop")
