"""The stream API over a Nemotron streaming RNN-T (the ``stateful`` runtime, the transducer
head): a tiny random transformers ``NemotronAsrStreamingForRNNT`` saved in the upstream layout,
converted by our converter, streamed from audio in random pieces (1 sample, empty, ...)
through ``create_stream`` / ``accept_waveform`` / ``decode_streams``; the finals equal
transformers' own streaming ``generate`` (chunks of 1 + 8r then 8(r + 1) of its own feature
extractor's frames, the last zero-padded); endpoints restart the predictor; and
``oasr stream --model BUNDLE`` end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.24'")
if not hasattr(tf, "NemotronAsrStreamingForRNNT"):
    pytest.skip("transformers has no NemotronAsrStreamingForRNNT; pip install "
                "'transformers>=5.24'", allow_module_level=True)

from oasr.cli.app import app  # noqa: E402
from oasr.engine.config import EngineConfig  # noqa: E402
from oasr.engine.decode.transducer_search import greedy_search  # noqa: E402
from oasr.engine.engine import ASREngine  # noqa: E402
from oasr.engine.request import Request  # noqa: E402
from oasr.models.registry import detect_converter  # noqa: E402
from oasr.streaming import StreamingRecognizer, StreamOptions  # noqa: E402
from oasr.vad.endpointer import EndpointConfig  # noqa: E402
from tests.helpers.upstream_e2e import full_fp32  # noqa: E402
from tests.models.fastconformer.reference import hf_hypotheses  # noqa: E402
from tests.models.nemotron_streaming.hf_tiny import VOCAB, save_hf  # noqa: E402
from tests.streaming.conformer_bundle import DATA, two_utterances  # noqa: E402
from tests.streaming.stream_cli import stream_finals  # noqa: E402

BLANK = VOCAB - 1
CLIPS = ("1688-142285-0002", "1688-142285-0003")


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    torch.set_num_threads(1)
    if not all((DATA / f"{c}.flac").is_file() for c in CLIPS):
        pytest.skip(f"needs the LibriSpeech test-other clips in {DATA}")
    root = tmp_path_factory.mktemp("nemotron")
    hf = save_hf(root / "hf", blank_bias=0.0)
    detect_converter(root / "hf").convert(root / "hf", root / "bundle")
    return hf, root / "hf", root / "bundle"


def engine(bundle: Path) -> ASREngine:
    return ASREngine(EngineConfig(model=str(bundle), device="cpu"))


def reference_ids(hf, audio: np.ndarray, lookahead: int) -> list[int]:
    """transformers' streaming ``generate`` over its own features, cut as its streaming
    generate requires (the last chunk zero-padded)."""
    fe = tf.NemotronAsrStreamingFeatureExtractor(feature_size=16)
    inputs = fe(audio, sampling_rate=16000, return_tensors="pt")
    feats = inputs.input_features[0, :int(inputs.attention_mask.sum())]
    first, per = 1 + 8 * lookahead, 8 * (lookahead + 1)
    chunks, pos, size = [], 0, first
    while pos < feats.shape[0]:
        c = feats[pos:pos + size]
        chunks.append(torch.cat([c, c.new_zeros(size - c.shape[0], c.shape[1])])[None])
        pos, size = pos + size, per
    with torch.no_grad():
        gen = hf.generate(input_features=(c for c in chunks), decoder_start_token_id=BLANK,
                          num_lookahead_tokens=lookahead)
    return hf_hypotheses(gen, torch.tensor([len(chunks) * (lookahead + 1)]), BLANK)[0][0]


def text(path: Path, ids: list[int]) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path / "tokenizer.json")).decode(ids).strip()


def feed(rec, streams, audios, rng, delays):
    """Feed every stream its audio in random pieces (stream i starts after ``delays[i]``
    rounds), decoding all ready streams in one call; -> finals per stream, partials."""
    pos = [0] * len(streams)
    finals: list[list] = [[] for _ in streams]
    partials: list[list[str]] = [[] for _ in streams]

    def drain():
        while any(rec.is_ready(s) for s in streams):
            rec.decode_streams(streams)
            for i, s in enumerate(streams):
                r = rec.get_result(s)
                if rec.is_endpoint(s):
                    finals[i].append(r)
                    rec.reset(s)
                else:
                    partials[i].append(r.text)

    rounds = 0
    while any(p < len(a) for p, a in zip(pos, audios)):
        for i, (s, a) in enumerate(zip(streams, audios)):
            if rounds < delays[i] or pos[i] >= len(a):
                continue
            n = int(rng.choice([0, 1, 1, 160, 999, 2400, 7000]))
            s.accept_waveform(16000, a[pos[i]:pos[i] + n])
            pos[i] += n
            if pos[i] >= len(a):
                s.input_finished()
        drain()
        rounds += 1
    drain()
    assert all(rec.is_done(s) for s in streams)
    return finals, partials


def test_streams_equal_reference_streaming_generate(nemotron):
    hf, src, bundle = nemotron
    eng = engine(bundle)
    assert eng.decode_method == "transducer"
    rec = StreamingRecognizer(eng, StreamOptions(endpoint=EndpointConfig(enabled=False)))
    assert rec.policy.kind == "stateful"
    assert rec.policy.session.name == "transducer"
    lookahead = eng.model.config.lookahead
    assert (rec.policy.geometry.first_window, rec.policy.window) == (
        1 + 8 * lookahead, 8 * (lookahead + 1))
    audios = [sf.read(DATA / f"{c}.flac", dtype="float32")[0] for c in CLIPS]
    streams = [rec.create_stream() for _ in audios]
    # the second stream starts later: cohorts mix first and later chunks
    finals, partials = feed(rec, streams, audios, np.random.default_rng(0), delays=[0, 7])
    for audio, got, grown in zip(audios, finals, partials):
        ids = reference_ids(hf, audio, lookahead)
        assert len(ids) > 10  # the random head emits: the check can fail
        assert len(got) == 1 and got[0].committed == text(src, ids)
        words = got[0].words
        assert [w.text for w in words] == got[0].committed.split()
        starts = [w.start for w in words]
        assert starts == sorted(starts) and 0 <= starts[0]
        assert words[-1].end <= len(audio) / 16000 + 1e-6
        # greedy commits every token: partials grow chunk by chunk toward the final
        assert len(grown) > 10 and got[0].committed.startswith(grown[len(grown) // 2])
        assert len(grown[len(grown) // 2]) < len(got[0].committed)


def test_endpoints_restart_the_predictor(nemotron):
    """Two utterances with a pause: two finals; the first is greedy over the encoder frames
    up to the cut, the second greedy from a fresh predictor over the frames after it (the
    encoder state goes on)."""
    _, _, bundle = nemotron
    eng = engine(bundle)
    audio, sr = two_utterances(gap_s=2.0)
    first_s = sf.info(str(DATA / f"{CLIPS[0]}.flac")).duration
    rec = StreamingRecognizer(eng, StreamOptions())
    s = rec.create_stream()
    cuts, finals, pos = [], [], 0
    rng = np.random.default_rng(1)
    while True:
        n = int(rng.choice([1, 800, 3000]))
        s.accept_waveform(sr, audio[pos:pos + n])
        pos += n
        if pos >= len(audio):
            s.input_finished()
        while rec.is_ready(s):
            rec.decode_streams([s])
            if rec.is_endpoint(s):
                finals.append(rec.get_result(s))
                cuts.append(s.state.utt_frame0)
                rec.reset(s)
        if rec.is_done(s):
            break
    texts = [f for f in finals if f.committed]
    assert len(texts) == 2 and texts[0].endpoint_rule == 2 and texts[1].endpoint_rule is None
    assert first_s - 0.5 < texts[0].end <= first_s + 2.0 and texts[1].start >= first_s
    # the oracle: the whole file's encoder frames (the stateful runtime, chunk by chunk)
    feats, _ = eng.inputs([Request("x", audio)])
    cfg = eng.model.config
    backend_frames, pos, size = [], 0, cfg.first_chunk_features()
    from oasr.engine.streaming_backend import build_streaming_backend

    backend = build_streaming_backend(eng.model)
    backend.allocate(0)
    flat = feats[0]
    with torch.no_grad():
        while pos < flat.shape[0]:
            c = flat[pos:pos + size]
            c = torch.cat([c, c.new_zeros(size - c.shape[0], c.shape[1])])
            out, lens = backend.forward_step([0], c[None], torch.tensor([size]))
            backend_frames.append(out[0, :int(lens[0])])
            pos, size = pos + size, cfg.chunk_features()
    hidden = torch.cat(backend_frames)
    bounds = [0, *cuts]
    utterances = []
    for a, b in zip(bounds, bounds[1:]):
        h = hidden[a:b]
        hyp = greedy_search(eng.model.predictor, eng.model.joiner, h[None],
                            torch.tensor([h.shape[0]]),
                            max_sym_per_frame=cfg.max_symbols_per_step)[0]
        utterances.append(eng.tokenizer.decode(hyp.tokens).strip())
    assert cuts[-1] == hidden.shape[0]
    assert [f.committed for f in finals] == utterances


def test_language_is_refused_on_an_unprompted_checkpoint(nemotron):
    _, _, bundle = nemotron
    eng = engine(bundle)
    with pytest.raises(ValueError, match="cannot act on 'language'"):
        StreamingRecognizer(eng, StreamOptions(language="en"))
    rec = StreamingRecognizer(eng)
    with pytest.raises(ValueError, match="cannot act on 'language'"):
        rec.create_stream(StreamOptions(language="en"))


def test_cli_streams_a_nemotron_bundle(nemotron, tmp_path):
    hf, src, bundle = nemotron
    audio, sr = two_utterances(gap_s=2.0)
    wav = tmp_path / "two.wav"
    sf.write(wav, audio, sr, subtype="FLOAT")
    out = tmp_path / "finals.jsonl"
    r, rows = stream_finals(bundle, wav, out)
    assert len(rows) == 2 and [x["endpoint_rule"] for x in rows] == [2, None]
    assert all(x["words"] and x["text"] for x in rows)
    assert [w["word"] for w in rows[0]["words"]] == rows[0]["text"].split()
    assert rows[0]["end"] <= rows[1]["start"]
    assert "stateful" in r.stderr
    # No endpointing: one final, transformers' streaming generate over the whole file.
    out2 = tmp_path / "one.jsonl"
    _, rows = stream_finals(bundle, wav, out2, "--no-endpoint")
    want = text(src, reference_ids(hf, audio, 1))
    assert want and [x["text"] for x in rows] == [want]
    r = CliRunner().invoke(app, ["stream", str(wav), "--model", str(bundle), "--device", "cpu",
                                 "--language", "en"])
    assert r.exit_code == 2 and "language" in r.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_streams_equal_reference_streaming_generate(nemotron, monkeypatch):
    # fp32 throughout: the reference is transformers' fp32 decode, compared token for token
    # (CUDA's default dtype, fp16, and cuDNN's TF32 convolutions flip near-tied argmaxes of
    # random weights)
    full_fp32("cuda", monkeypatch)
    hf, src, bundle = nemotron
    eng = ASREngine(EngineConfig(model=str(bundle), device="cuda", dtype="float32"))
    rec = StreamingRecognizer(eng, StreamOptions(endpoint=EndpointConfig(enabled=False)))
    audios = [sf.read(DATA / f"{c}.flac", dtype="float32")[0] for c in CLIPS]
    streams = [rec.create_stream() for _ in audios]
    finals, _ = feed(rec, streams, audios, np.random.default_rng(3), delays=[0, 3])
    for audio, got in zip(audios, finals):
        assert [f.committed for f in got] == [text(src, reference_ids(hf, audio, 1))]
