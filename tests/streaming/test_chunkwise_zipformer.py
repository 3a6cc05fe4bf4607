"""The stream API and ``oasr stream`` over a causal Zipformer transducer (the ``slot`` runtime,
the transducer head): random weights in icefall's layout (``pretrained.pt``, ``tokens.txt``,
``params.json`` for the feature width and the decoding chunk) converted by ``oasr convert``,
streamed from audio in random pieces with staggered starts. The oracle is icefall's streaming
decode (``DecodeStream`` framing, ``StreamingEncoderWrapper``) over the offline features of the
same audio; the final equals icefall's ``greedy_search`` over those chunked encoder outputs
(the start history of our offline and streaming searches; the per-chunk parity, including
icefall's streaming search, is tests/models/zipformer/test_streaming_slot.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import Request
from oasr.streaming import StreamingRecognizer, StreamOptions
from oasr.vad.endpointer import EndpointConfig
from tests.cli.test_zipformer_cli import PIECES
from tests.helpers.zipformer_oracle import ORACLE_MISSING, oracle
from tests.models.zipformer.test_streaming_slot import CHUNK, LEFT, causal_models, icefall_stream
from tests.streaming.conformer_bundle import DATA, two_utterances
from tests.streaming.stream_cli import stream_finals
from tests.streaming.test_chunkwise_transducer import feed

CLIPS = ("1688-142285-0002", "1688-142285-0003")


@pytest.fixture(scope="module")
def zipformer(tmp_path_factory):
    torch.set_num_threads(1)
    up = oracle()
    if up is None:
        pytest.skip(ORACLE_MISSING)
    if not all((DATA / f"{c}.flac").is_file() for c in CLIPS):
        pytest.skip(f"needs the LibriSpeech test-other clips in {DATA}")
    ref, _ = causal_models(up, 0)
    root = tmp_path_factory.mktemp("zipformer")
    src = root / "icefall"
    src.mkdir()
    torch.save({"model": ref.state_dict()}, src / "pretrained.pt")
    (src / "tokens.txt").write_text("".join(f"{p} {i}\n" for i, p in enumerate(PIECES)),
                                    encoding="utf-8")
    (src / "params.json").write_text(json.dumps({
        "feature_dim": 20, "decode_chunk_size": CHUNK, "decode_left_context_frames": LEFT}))
    result = CliRunner().invoke(app, ["convert", str(src), str(root / "bundle")])
    assert result.exit_code == 0, result.output
    return up, ref, root / "bundle"


def engine(bundle: Path) -> ASREngine:
    return ASREngine(EngineConfig(model=str(bundle), device="cpu"))


def reference_text(up, ref, eng, audio: np.ndarray) -> str:
    feats, _ = eng.inputs([Request("x", audio)])
    with torch.no_grad():
        chunks, _ = icefall_stream(up, ref, feats[0])
        hidden = torch.cat(chunks)[None]
        ids = up.search.greedy_search(ref, hidden, torch.tensor([hidden.shape[1]]))[0]
    assert len(ids) > 10  # the random head emits: the check can fail
    return eng.tokenizer.decode(ids).strip()


def test_streams_equal_icefall_streaming_forward(zipformer):
    up, ref, bundle = zipformer
    eng = engine(bundle)
    assert eng.decode_method == "transducer"
    rec = StreamingRecognizer(eng, StreamOptions(endpoint=EndpointConfig(enabled=False)))
    policy = rec.policy
    assert policy is not None and policy.kind == "slot" and policy.session.name == "transducer"
    # icefall's streaming_decode.py tail: the subsampler's 13 frames and tail_pad_len 30
    assert (policy.window, policy.stride, policy.geometry.tail) == (2 * CHUNK + 13, 2 * CHUNK,
                                                                    43)
    audios = [sf.read(DATA / f"{c}.flac", dtype="float32")[0] for c in CLIPS]
    streams = [rec.create_stream() for _ in audios]
    finals, partials = feed(rec, streams, audios, np.random.default_rng(0), delays=[0, 5])
    for audio, got, grown in zip(audios, finals, partials):
        want = reference_text(up, ref, eng, audio)
        assert len(got) == 1 and got[0].committed == want
        words = got[0].words
        assert [w.text for w in words] == want.split()
        assert words[-1].end <= len(audio) / 16000 + 1e-6
        assert len(grown) > 5 and len(grown[len(grown) // 2]) < len(want)


def test_cli_streams_a_zipformer_bundle(zipformer, tmp_path):
    up, ref, bundle = zipformer
    audio, sr = two_utterances(gap_s=2.0)
    wav = tmp_path / "two.wav"
    sf.write(wav, audio, sr, subtype="FLOAT")
    out = tmp_path / "finals.jsonl"
    r, rows = stream_finals(bundle, wav, out, "--no-endpoint")
    assert "slot" in r.stderr
    want = reference_text(up, ref, engine(bundle), audio)
    assert [x["text"] for x in rows] == [want]
    out2 = tmp_path / "endpointed.jsonl"
    _, rows = stream_finals(bundle, wav, out2)
    assert len(rows) >= 2 and all(x["error"] is None for x in rows if "error" in x)
    assert all(a["end"] <= b["start"] for a, b in zip(rows, rows[1:]))
