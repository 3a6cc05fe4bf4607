"""Nemotron streaming RNN-T, end to end: the transformers 5 folders under
``tests/fixtures/nemotron_streaming/`` (``save_pretrained`` of the model and its processor;
``make.py``) through ``oasr convert``, then ``oasr transcribe`` (offline) and ``oasr stream
--no-endpoint`` (cache-aware chunks) with default flags, against transformers' offline
``generate`` and its streaming ``generate`` over the same clips: text and token ids equal, on
the CPU and in fp32 on CUDA."""

from __future__ import annotations

import pytest

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.streaming import EndpointConfig, StreamingRecognizer, StreamOptions
from tests.helpers.upstream_e2e import (
    CLIPS,
    DEVICES,
    FIXTURES,
    assert_matches,
    clip_paths,
    convert,
    engine_token_ids,
    full_fp32,
    load_expected,
    read_clip,
    require_audio,
    transcribe,
)
from tests.streaming.stream_cli import stream_finals

EXPECTED = load_expected("nemotron_streaming")


@pytest.fixture(params=sorted(EXPECTED["variants"]))
def bundle(request, tmp_path, monkeypatch):
    require_audio()
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "bundle"
    assert "nemotron_streaming/huggingface" in convert(
        FIXTURES / "nemotron_streaming" / request.param, out)
    return request.param, out


@pytest.mark.parametrize("device", DEVICES)
def test_offline_equals_transformers_generate(bundle, device, tmp_path, monkeypatch):
    full_fp32(device, monkeypatch)
    variant, path = bundle
    rows = transcribe(path, tmp_path, device=device)
    assert_matches(EXPECTED["variants"][variant]["greedy"], rows,
                   engine_token_ids(path, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_streaming_equals_transformers_streaming_generate(bundle, device, tmp_path, monkeypatch):
    full_fp32(device, monkeypatch)
    variant, path = bundle
    rows, ids = {}, {}
    for clip, wav in zip(CLIPS, clip_paths()):
        _, finals = stream_finals(path, wav, tmp_path / f"{clip}.jsonl", "--no-endpoint",
                                  "--dtype", "fp32", device=device)
        assert len(finals) == 1, finals
        rows[clip] = {"text": finals[0]["text"]}
    rec = StreamingRecognizer(ASREngine(EngineConfig(model=str(path), device=device,
                                                     dtype="float32")),
                              StreamOptions(endpoint=EndpointConfig(enabled=False)))
    for clip, wav in zip(CLIPS, clip_paths()):
        s = rec.create_stream()
        s.accept_waveform(16000, read_clip(wav))
        s.input_finished()
        while rec.is_ready(s):
            rec.decode_streams([s])
        ids[clip] = rec.get_result(s).token_ids
    assert_matches(EXPECTED["variants"][variant]["streaming"], rows, ids)
