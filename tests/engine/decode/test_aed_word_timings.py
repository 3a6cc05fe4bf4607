"""Word timings on the ``aed`` family: cross-attention DTW, who pays for it, what is refused."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from tests.helpers.data import SHARED_DATA
from tests.helpers.real_tiny_en import needs_tiny_en
from tests.helpers.tiny_whisper import torch_threads
from tests.transcribe.conftest import build_tiny_loaded

LIBRISPEECH = SHARED_DATA / "librispeech-test-other-70" / "audio"


def tiny_engine(**options) -> ASREngine:
    loaded = build_tiny_loaded()
    loaded.model.config.alignment_heads = [[0, 0], [0, 1]]
    return ASREngine(EngineConfig(device="cpu", max_new_tokens=4, decode_options=options),
                     loaded=loaded)


def audio(seed: int, seconds: float = 3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32)


def count_alignment_passes(engine: ASREngine) -> list[int]:
    calls = []
    real = engine.model.decoder.cross_attention_scores

    def spy(tokens, *args, **kwargs):
        calls.append(tokens.shape[0])
        return real(tokens, *args, **kwargs)

    engine.model.decoder.cross_attention_scores = spy
    return calls


def test_timings_off_runs_no_teacher_forced_pass():
    engine = tiny_engine()
    calls = count_alignment_passes(engine)
    outs = list(engine.run([Request(f"r{i}", audio(i)) for i in range(5)]))
    assert len(outs) == 5 and all(o.words is None and o.error is None for o in outs)
    assert calls == []


def test_only_the_rows_that_asked_are_aligned():
    engine = tiny_engine()
    calls = count_alignment_passes(engine)
    reqs = [Request(f"r{i}", audio(i), DecodingOptions(word_timestamps=i % 2 == 0))
            for i in range(6)]
    outs = {o.request_id: o for o in engine.run(reqs)}
    assert sum(calls) == 3  # one pass row per finished row that asked, batched
    for i in range(6):
        out = outs[f"r{i}"]
        if i % 2:
            assert out.words is None
            continue
        assert out.words, out.text
        pos = 0
        for w in out.words:
            pos = out.text.index(w.word, pos) + len(w.word)  # literal substrings, in order
            assert 0.0 <= w.start <= w.end <= 3.0 + 1e-6
            assert 0.0 <= w.confidence <= 1.0
        assert len(out.timestamps) == len([t for t in out.token_ids if t < 50256])


def test_rows_finishing_within_one_engine_step_share_one_pass():
    """Rows ending at different decoder steps (their own token caps) of one tick, the first
    already at prefill, are timed together when the tick ends: one pass, not one per
    retirement; the words are those of rows timed alone."""
    from tests.helpers.tiny_whisper import JoinTokenizer, build_tiny_whisper, random_audio

    class PiecesTokenizer(JoinTokenizer):
        def token_pieces(self, ids):
            return [("" if i == 0 else " ") + str(t) for i, t in enumerate(ids)]

    loaded = build_tiny_whisper(seed=1, with_hf=False).loaded  # rows run to their cap
    loaded.tokenizer = PiecesTokenizer()
    loaded.model.config.alignment_heads = [[0, 0], [1, 1]]
    engine = ASREngine(EngineConfig(device="cpu", max_new_tokens=4, max_tick_ms=1e6,
                                    decode_steps_per_tick=64), loaded=loaded)
    calls = count_alignment_passes(engine)
    reqs = [Request(f"r{k}", random_audio(k),
                    DecodingOptions(word_timestamps=True, max_new_tokens=k))
            for k in (1, 2, 3, 4)]
    together = {o.request_id: o for o in engine.run(reqs)}
    assert len({len(o.token_ids) for o in together.values()}) >= 3  # different steps
    assert calls == [4]
    for req in reqs:
        alone = next(iter(engine.run([req])))
        assert [(w.word, w.start, w.end) for w in alone.words] == [
            (w.word, w.start, w.end) for w in together[req.request_id].words]


def test_beam_search_times_words_and_an_unknown_clock_refuses():
    beam = tiny_engine(beam_size=2)
    assert beam.strategy.word_timing_modes == ("offline",)
    calls = count_alignment_passes(beam)
    reqs = [Request(f"b{i}", audio(i), DecodingOptions(word_timestamps=i != 1))
            for i in range(3)]
    outs = {o.request_id: o for o in beam.run(reqs)}
    assert sum(calls) == 2  # the winners of the two rows that asked, nothing else
    assert outs["b1"].words is None
    for i in (0, 2):
        out = outs[f"b{i}"]
        assert out.words and [w.word for w in out.words] == out.text.split()
    greedy = tiny_engine()
    assert greedy.strategy.word_timing_modes == ("offline",)
    greedy.strategy.feature_config = None  # the frame clock cannot be resolved
    with pytest.raises(ValueError, match="cannot time words"):
        greedy.add_request(Request("c", audio(0), DecodingOptions(word_timestamps=True)))


@pytest.mark.skipif(not LIBRISPEECH.is_dir(), reason="needs ../shared/data")
def test_real_tiny_en_token_times_match_transformers():
    """Raw DTW spans (no pause snap) agree with transformers' ``return_token_timestamps`` on
    the same weights and alignment heads.

    Not exactly: we follow openai-whisper (crop the scores to the audio's frames, then softmax;
    DTW over the rows from <|notimestamps|> to the last text token), transformers softmaxes over
    the whole window before cropping and runs DTW over every row of the sequence, which moves the
    first and last tokens. Measured on this utterance: 7 of 11 token starts equal, median
    difference 0, largest 0.46 s (the first word)."""
    from oasr.bench.peers import (
        build_transformers_whisper,
        suppress_processors,
        whisper_feature_extractor,
    )
    from oasr.models.loader import load_pretrained

    wav, sr = sf.read(sorted(LIBRISPEECH.glob("*.flac"))[2], dtype="float32")
    lm = load_pretrained(None)
    with torch_threads(2):
        engine = ASREngine(EngineConfig(device="cpu", dtype="fp32",
                                        decode_options={"pause_snap_db": 0.0}), loaded=lm)
        out = next(iter(engine.run([Request("u", wav, DecodingOptions(word_timestamps=True))])))
        model, gen = build_transformers_whisper(lm)
        gen.alignment_heads = lm.model.config.alignment_heads
        inputs = whisper_feature_extractor(lm)(wav, sampling_rate=sr, return_tensors="pt",
                                               return_attention_mask=True)
        # The mask tells transformers where the audio ends, as our clock does.
        ref = model.generate(inputs.input_features, attention_mask=inputs.attention_mask,
                             generation_config=gen, return_dict_in_generate=True,
                             logits_processor=suppress_processors(lm),
                             return_token_timestamps=True)
    seq = ref["sequences"][0].tolist()
    times = ref["token_timestamps"][0].tolist()
    text_at = [k for k, t in enumerate(seq) if t < lm.model.config.eos_token_id]
    assert [seq[k] for k in text_at] == out.token_ids
    # transformers stamps each token with where the path leaves it: the next token's start.
    theirs = [times[k - 1] for k in text_at]
    diffs = np.abs(np.array(out.timestamps) - np.array(theirs))
    assert np.median(diffs) <= 0.02, diffs
    assert np.mean(diffs <= 0.1) >= 0.75, diffs


def test_utterance_confidence_does_not_depend_on_asking_for_timings():
    engine = tiny_engine()
    a = audio(3)
    # Timestamp mode: the mean is over the text tokens either way, never the timestamps.
    outs = {o.request_id: o for o in engine.run([
        Request("plain", a, DecodingOptions(timestamps=True)),
        Request("timed", a, DecodingOptions(timestamps=True, word_timestamps=True))])}
    assert any(t > 50256 for t in outs["plain"].token_ids)  # a timestamp was decoded
    assert outs["plain"].confidence is not None
    # Same tokens, two rows of one batch: equal up to fp32 batch noise.
    assert outs["timed"].confidence == pytest.approx(outs["plain"].confidence, rel=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(not LIBRISPEECH.is_dir(), reason="needs ../shared/data")
def test_real_tiny_en_beam_of_one_times_words_as_greedy_and_beam_five_keeps_its_words(
        monkeypatch):
    """The beam path's alignment pass is greedy's: forced to width 1, the beam group decodes
    greedy's tokens and must give exactly greedy's words; at width 5 every row keeps words."""
    import oasr.engine.decode.aed as aed
    from oasr.engine.decode.incremental_beam import ArBeamGroup
    from oasr.models.loader import load_pretrained

    wavs = [sf.read(p, dtype="float32")[0] for p in sorted(LIBRISPEECH.glob("*.flac"))[:3]]
    lm = load_pretrained(None)

    def words(engine):
        reqs = [Request(f"u{i}", w, DecodingOptions(word_timestamps=True))
                for i, w in enumerate(wavs)]
        outs = {o.request_id: o for o in engine.run(reqs)}
        return [[(w.word, w.start, w.end) for w in outs[f"u{i}"].words] for i in range(3)]

    with torch_threads(2):
        greedy = words(ASREngine(EngineConfig(device="cpu", dtype="fp32"), loaded=lm))
        five = words(ASREngine(EngineConfig(device="cpu", dtype="fp32",
                                            decode_options={"beam_size": 5}), loaded=lm))
        monkeypatch.setattr(aed, "ArBeamGroup",
                            lambda *a, **kw: ArBeamGroup(*a, **{**kw, "beam_size": 1}))
        one = words(ASREngine(EngineConfig(device="cpu", dtype="fp32",
                                           decode_options={"beam_size": 2}), loaded=lm))
    assert all(greedy)
    for g, o in zip(greedy, one):
        assert [w for w, _, _ in g] == [w for w, _, _ in o]
        assert np.allclose([t for _, *t in g], [t for _, *t in o], atol=1e-6)
    assert all(len(f) >= 0.8 * len(g) for f, g in zip(five, greedy))
    for f in five:
        assert all(e > s for _, s, e in f)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.skipif(not LIBRISPEECH.is_dir(), reason="needs ../shared/data")
@needs_tiny_en
def test_real_tiny_en_cuda_words_match_cpu_greedy_and_beam():
    """The CUDA path (paged KV under greedy, dense under beam) times the same words as the CPU
    one, to a frame: the alignment matrix is built on the device, pauses on the host audio."""
    wavs = [sf.read(p, dtype="float32")[0] for p in sorted(LIBRISPEECH.glob("*.flac"))[:4]]

    def words(device, **options):
        engine = ASREngine(EngineConfig(device=device, dtype="fp32", decode_options=options))
        reqs = [Request(f"u{i}", w, DecodingOptions(word_timestamps=True))
                for i, w in enumerate(wavs)]
        outs = {o.request_id: o for o in engine.run(reqs)}
        return [outs[f"u{i}"] for i in range(len(wavs))]

    for options in ({}, {"beam_size": 5}):
        cpu, gpu = words("cpu", **options), words("cuda", **options)
        for c, g in zip(cpu, gpu):
            if c.text != g.text:  # a near-tie flipped a token; the words then differ too
                continue
            assert [w.word for w in c.words] == [w.word for w in g.words]
            starts = np.array([[a.start, b.start] for a, b in zip(c.words, g.words)])
            assert np.abs(starts[:, 0] - starts[:, 1]).max() <= 0.021
            assert all(w.end > w.start for w in g.words)
