"""Nemotron streaming RNN-T, end to end: the transformers 5 folders under
``tests/fixtures/nemotron_streaming/`` (``save_pretrained`` of the model and its processor;
``make.py``) through ``oasr convert``, then ``oasr transcribe`` (offline) and ``oasr stream
--no-endpoint`` (cache-aware chunks) with default flags, and the streaming API, against
transformers' offline ``generate`` and its streaming ``generate`` over the same clips: text and
token ids equal, on the CPU and in fp32 on CUDA."""

from __future__ import annotations

import pytest

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.streaming import EndpointConfig, StreamingRecognizer, StreamOptions
from oasr.streaming.stream import Stream
from tests.helpers.upstream_e2e import (
    CLIPS,
    DEVICES,
    FIXTURES,
    assert_matches,
    clip_paths,
    convert_fixture,
    full_fp32,
    load_expected,
    read_clip,
    transcribe,
)
from tests.streaming.stream_cli import stream_finals

EXPECTED = load_expected("nemotron_streaming")


@pytest.fixture(params=sorted(EXPECTED["variants"]))
def bundle(request, tmp_path, monkeypatch):
    out, converted = convert_fixture(FIXTURES / "nemotron_streaming" / request.param,
                                     tmp_path, monkeypatch)
    assert "nemotron_streaming/huggingface" in converted
    return request.param, out


@pytest.mark.parametrize("device", DEVICES)
def test_offline_equals_transformers_generate(bundle, device, tmp_path, monkeypatch):
    full_fp32(device, monkeypatch)
    variant, path = bundle
    rows = transcribe(path, tmp_path, device=device)
    assert_matches(EXPECTED["variants"][variant]["greedy"], rows)


@pytest.mark.parametrize("device", DEVICES)
def test_streaming_equals_transformers_streaming_generate(bundle, device, tmp_path, monkeypatch):
    full_fp32(device, monkeypatch)
    variant, path = bundle
    expected = EXPECTED["variants"][variant]["streaming"]
    finals_ids: list[list[int] | None] = []
    finalize = Stream.finalize

    def spy(self, *args, token_ids=None, **kwargs):  # noqa: ANN001, ANN202
        finals_ids.append(token_ids)
        return finalize(self, *args, token_ids=token_ids, **kwargs)

    monkeypatch.setattr(Stream, "finalize", spy)
    rows = {}
    for clip, wav in zip(CLIPS, clip_paths()):
        finals_ids.clear()
        _, finals = stream_finals(path, wav, tmp_path / f"{clip}.jsonl", "--no-endpoint",
                                  "--dtype", "fp32", device=device)
        assert len(finals) == 1 and len(finals_ids) == 1, finals
        rows[clip] = {"text": finals[0]["text"], "token_ids": finals_ids[0]}
    assert_matches(expected, rows)
    # the same through the API: a final's StreamResult carries its token ids
    rec = StreamingRecognizer(ASREngine(EngineConfig(model=str(path), device=device,
                                                     dtype="float32")),
                              StreamOptions(endpoint=EndpointConfig(enabled=False)))
    for clip, wav in zip(CLIPS, clip_paths()):
        s = rec.create_stream()
        s.accept_waveform(16000, read_clip(wav))
        s.input_finished()
        while rec.is_ready(s):
            rec.decode_streams([s])
        final = rec.get_result(s)
        rows[clip] = {"text": final.text, "token_ids": final.token_ids}
    assert_matches(expected, rows)
