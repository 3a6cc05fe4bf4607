"""The stream API over a chunk-wise Conformer (the ``paged`` runtime): streamed finals equal the
model's own offline chunk-masked CTC decoding, partials grow, endpoints cut utterances, words
are timed on the stream's clock; and ``oasr stream --model CONFORMER_BUNDLE FILE``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.engine.config import EngineConfig
from oasr.engine.decode.ctc import ctc_search
from oasr.engine.decode.ctc_streaming import CtcPrefixBeamStream
from oasr.engine.engine import ASREngine
from oasr.engine.request import Request
from oasr.streaming import StreamingRecognizer, StreamOptions
from oasr.vad.endpointer import EndpointConfig
from tests.streaming.conformer_bundle import DATA, two_utterances, write_conformer_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    torch.set_num_threads(1)
    return write_conformer_bundle(tmp_path_factory.mktemp("conformer") / "bundle")


def engine(bundle, beam: int) -> ASREngine:
    return ASREngine(EngineConfig(model=str(bundle), device="cpu", decode_method="ctc",
                                  decode_options={"beam_size": beam}))


def offline_text(eng: ASREngine, audio: np.ndarray, chunk: int, beam: int) -> str:
    feats, lens = eng.inputs([Request("x", audio)])
    with torch.no_grad():
        out, out_lens = eng.model.encoder(feats, lens, chunk_frames=chunk, left_chunks=-1)
        lp = eng.model.ctc_log_probs(out)
    if beam == 1:
        hyp = ctc_search(lp.numpy(), out_lens.numpy(), 0, 1, 1.0, 1)[0][0]
        return eng.tokenizer.decode(hyp.tokens.tolist()).strip()
    # The beam over the whole offline sequence in one pass. Not the native search: on this
    # input it keeps one token sequence twice (a prefix that leaves the beam and comes back
    # gets a new trie node, so its live child is not merged), where WeNet's dict merges it.
    search = CtcPrefixBeamStream(beam, 0)
    search.feed(lp[0, :out_lens[0]].numpy())
    return eng.tokenizer.decode(search.best().tokens).strip()


def run(rec, audio, sr, rng):
    s = rec.create_stream()
    partials, finals, i = [], [], 0
    while i < len(audio):
        n = int(rng.choice([0, 1, 333, 1600, 7000]))
        s.accept_waveform(sr, audio[i:i + n])
        i += n
        while rec.is_ready(s):
            rec.decode_streams([s])
            r = rec.get_result(s)
            if rec.is_endpoint(s):
                finals.append(r)
                rec.reset(s)
            else:
                partials.append(r.text)
    s.input_finished()
    while rec.is_ready(s):
        rec.decode_streams([s])
        if rec.is_endpoint(s):
            finals.append(rec.get_result(s))
            rec.reset(s)
    assert rec.is_done(s)
    return s, partials, finals


@pytest.mark.parametrize("beam", [1, 4])
def test_streamed_final_equals_offline_chunk_masked_ctc(bundle, beam):
    eng = engine(bundle, beam)
    assert eng.model.encoder.streaming_kind == "paged"
    audio, sr = two_utterances()
    rec = StreamingRecognizer(eng, StreamOptions(endpoint=EndpointConfig(enabled=False),
                                                 chunk_frames=8))
    assert rec.policy.kind == "paged"
    s, partials, finals = run(rec, audio, sr, np.random.default_rng(beam))
    want = offline_text(eng, audio, 8, beam)
    assert len(want) > 20  # the scaled random head emits text: the check can fail
    assert len(finals) == 1 and finals[0].committed == want
    # Partials grow toward the final, chunk by chunk (committed + " " + partial: this
    # character-unit model's text has no spaces of its own).
    flat = [p.replace(" ", "") for p in partials]
    assert len(flat) > 10 and flat[-1] and want.startswith(flat[len(flat) // 2])
    assert len(flat[len(flat) // 2]) < len(flat[-1])
    w = finals[0].words
    assert w and 0 <= w[0].start < w[-1].end <= len(audio) / sr + 1e-6


def test_endpoints_cut_utterances_at_the_pause(bundle):
    eng = engine(bundle, 1)
    audio, sr = two_utterances(gap_s=2.0)
    first = sf.info(str(DATA / "1688-142285-0002.flac")).duration
    rec = StreamingRecognizer(eng, StreamOptions(chunk_frames=4))
    s, _, finals = run(rec, audio, sr, np.random.default_rng(0))
    texts = [f for f in finals if f.committed]
    assert len(texts) == 2 and texts[0].endpoint_rule == 2 and texts[1].endpoint_rule is None
    # The first final ends inside the pause, the second starts after it.
    assert first - 0.5 < texts[0].end <= first + 2.0
    assert texts[1].start >= first
    assert s.stats.first_text_head is not None and s.stats.commit_lags


def test_chunkwise_refusals(bundle):
    eng = engine(bundle, 1)
    eng.strategy.options.blank_skip_threshold = 0.9
    with pytest.raises(ValueError, match="blank_skip_threshold"):
        StreamingRecognizer(eng)
    rescoring = ASREngine(EngineConfig(model=str(bundle), device="cpu",
                                       decode_method="ctc_aed_rescoring"))
    with pytest.raises(ValueError, match="'ctc_aed_rescoring' has no streaming head"):
        StreamingRecognizer(rescoring)


def test_cli_streams_a_conformer_bundle(bundle, tmp_path):
    audio, sr = two_utterances(gap_s=2.0)
    wav = tmp_path / "two.wav"
    sf.write(wav, audio, sr, subtype="FLOAT")
    out = tmp_path / "finals.jsonl"
    r = CliRunner().invoke(app, ["stream", str(wav), "--model", str(bundle), "--device", "cpu",
                                 "-d", "beam_size=1", "--chunk-frames", "4", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and [x["endpoint_rule"] for x in rows] == [2, None]
    assert all(x["words"] and x["text"] for x in rows)
    assert rows[0]["end"] <= rows[1]["start"]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 2 and lines[0].endswith(rows[0]["text"])
    assert "streamed" in r.stderr and "paged" in r.stderr
    # No endpointing: one final, the offline chunk-masked decode of the whole file.
    out2 = tmp_path / "one.jsonl"
    r = CliRunner().invoke(app, ["stream", str(wav), "--model", str(bundle), "--device", "cpu",
                                 "-d", "beam_size=1", "--chunk-frames", "4", "--no-endpoint",
                                 "-o", str(out2)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out2.read_text().splitlines()]
    assert [x["text"] for x in rows] == [offline_text(engine(bundle, 1), audio, 4, 1)]
