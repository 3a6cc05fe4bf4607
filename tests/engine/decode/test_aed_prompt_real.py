"""Whisper prompts and the no-speech probability on the real tiny.en and real speech.

Oracles: transformers' ``WhisperForConditionalGeneration.generate(prompt_ids=...)`` holding the
very weights our loader produced (token-identical greedy transcripts, one row at a time, while
ours decodes rows with different prompt lengths left-padded in one batch), and a direct
softmax of the decoder's logits after ``<|startoftranscript|>``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio import load_audio
from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from oasr.features.whisper_logmel import whisper_logmel
from tests.helpers.data import SHARED_DATA
from tests.helpers.real_tiny_en import require_tiny_en_and_speech
from tests.helpers.tiny_whisper import torch_threads

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
# (utterance, prompt): tiny.en hears "Helstone" as "Halston" unprompted.
ROWS = (("1688-142285-0005", "Helstone."), ("1688-142285-0002", None),
        ("367-130732-0006", "Lobster à la Newberg, Delmonico's."))
MAX_NEW = 64

require_tiny_en_and_speech(AUDIO)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def loaded():
    from oasr.models.loader import load_pretrained

    return load_pretrained()  # the packaged default: Whisper tiny.en


@pytest.fixture(scope="module")
def audio():
    return {u: load_audio(AUDIO / f"{u}.flac") for u, _ in ROWS}


def _decode(loaded, audio, rows, **config) -> dict:
    engine = ASREngine(EngineConfig(device="cpu", max_batch_size=len(rows),
                                    max_new_tokens=MAX_NEW, **config), loaded=loaded)
    requests = [Request(f"{u}|{p}", audio[u], DecodingOptions(prompt=p)) for u, p in rows]
    outs = {o.request_id: o for o in engine.run(requests)}
    assert all(o.error is None for o in outs.values()), outs
    return outs


def _features(loaded, samples: np.ndarray) -> torch.Tensor:
    wav = torch.from_numpy(samples)[None]
    return whisper_logmel(wav, torch.tensor([wav.shape[1]]), loaded.feature_config)[0]


def test_prompted_rows_batched_match_transformers_generate_prompt_ids(loaded, audio):
    import transformers

    from tests.models.whisper.test_real_weights import _transformers_twin

    transformers.logging.set_verbosity_error()
    cfg, tok = loaded.model.config, loaded.tokenizer
    ours = _decode(loaded, audio, ROWS)
    paged = _decode(loaded, audio, ROWS, kv_storage="paged")
    hf = _transformers_twin(loaded.model)
    hf.generation_config.no_timestamps_token_id = cfg.no_timestamps_token_id
    hf.generation_config.is_multilingual = False
    for u, p in ROWS:
        kw = {}
        if p is not None:
            kw["prompt_ids"] = torch.tensor([tok.sot_prev, *tok.encode(" " + p.strip())])
        with torch.no_grad():
            seq = hf.generate(_features(loaded, audio[u]).transpose(1, 2), do_sample=False,
                              num_beams=1, max_new_tokens=MAX_NEW,
                              suppress_tokens=cfg.suppress_tokens,
                              begin_suppress_tokens=cfg.begin_suppress_tokens, **kw)[0].tolist()
        expected = seq[:seq.index(cfg.eos_token_id)] if cfg.eos_token_id in seq else seq
        assert ours[f"{u}|{p}"].token_ids == expected, (u, p)
        assert paged[f"{u}|{p}"].token_ids == expected, (u, p)
    # The prompt does what a user asks of it: the rare name is spelled as prompted.
    assert "Helstone" in ours["1688-142285-0005|Helstone."].text
    unprompted = _decode(loaded, audio, [("1688-142285-0005", None)])
    assert "Helstone" not in unprompted["1688-142285-0005|None"].text


def test_no_speech_prob_is_the_softmax_after_startoftranscript(loaded, audio):
    cfg, tok = loaded.model.config, loaded.tokenizer
    ours = _decode(loaded, audio, ROWS)
    model = loaded.model
    for u, p in ROWS:
        prefix = [] if p is None else [tok.sot_prev, *tok.encode(" " + p.strip())]
        with torch.no_grad():
            enc = model.encode_offline(_features(loaded, audio[u]))
            logits = model.decoder.forced_logits(
                enc, torch.tensor([prefix + list(cfg.sot_sequence)]))
        direct = torch.softmax(logits[0, len(prefix)].float(), -1)[tok.no_speech].item()
        got = ours[f"{u}|{p}"].no_speech_prob
        assert got == pytest.approx(direct, abs=1e-5), (u, p)
        assert 0.0 < got < 0.5  # speech


def test_prompt_keeps_whispers_last_223_tokens(loaded, audio):
    engine = ASREngine(EngineConfig(device="cpu"), loaded=loaded)
    strategy = engine.strategy
    long = " ".join(f"word{i}" for i in range(400))
    ids = list(strategy.prompter.parts(DecodingOptions(prompt=long)).context)
    tokens = loaded.tokenizer.encode(" " + long)
    assert len(tokens) > 223
    assert ids == [loaded.tokenizer.sot_prev, *tokens[-223:]]
    assert strategy.prompter.parts(DecodingOptions(prompt="   ")).context == ()
    # The longest prompt still leaves the row its own cap within Whisper's 448 positions.
    out = _decode(loaded, audio, [("1688-142285-0002", long), ("1688-142285-0002", None)])
    assert out["1688-142285-0002|None"].text == "You don't mean that you thought me so silly."


def test_a_batch_splits_only_where_padding_would_cut_a_rows_cap(loaded):
    engine = ASREngine(EngineConfig(device="cpu"), loaded=loaded)  # the engine cap: 224
    strategy = engine.strategy
    long = " ".join(f"word{i}" for i in range(400))  # a full 224-token prefix
    a = np.zeros(16000, dtype=np.float32)
    full = [Request("long", a, DecodingOptions(prompt=long)), Request("none", a),
            Request("short", a, DecodingOptions(prompt="Helstone."))]
    strategy._prefixes = {}
    # 224 + 2 + 224 > 448: the unprompted rows would lose 4 tokens of cap beside the long one.
    assert strategy._prefill_groups(full) == [[0], [1, 2]]
    capped = [Request(r.request_id, a, DecodingOptions(prompt=r.decoding.prompt,
                                                       max_new_tokens=100)) for r in full]
    assert strategy._prefill_groups(capped) == [[0, 1, 2]]
    assert strategy._max_new(full[0].decoding, 224) == 448 - 224 - 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_prompted_rows_on_cuda_paged_step_graphs_match_the_cpu(loaded, audio):
    """The left-padded rows through the paged CUDA kernel and captured step graphs (fp32, so
    the tokens can match the CPU's exactly)."""
    from oasr.models.loader import load_pretrained

    cpu = _decode(loaded, audio, ROWS)
    engine = ASREngine(EngineConfig(device="cuda", dtype="fp32", max_batch_size=len(ROWS),
                                    max_new_tokens=MAX_NEW, kv_storage="paged"),
                       loaded=load_pretrained())  # a copy of its own: the engine moves it
    assert engine.strategy.step_graphs is not None
    reqs = [Request(f"{u}|{p}", audio[u], DecodingOptions(prompt=p)) for u, p in ROWS]
    cuda = {o.request_id: o for o in engine.run(reqs)}
    for key, out in cpu.items():
        assert cuda[key].token_ids == out.token_ids, key
        assert cuda[key].no_speech_prob == pytest.approx(out.no_speech_prob, abs=1e-3), key


def test_beam_search_takes_prompts_of_different_lengths_in_one_batch(loaded, audio):
    rows = [("1688-142285-0005", "Helstone."), ("1688-142285-0002", None)]
    beam = _decode(loaded, audio, rows, decode_options={"beam_size": 2})
    assert "Helstone" in beam["1688-142285-0005|Helstone."].text
    assert beam["1688-142285-0002|None"].text == "You don't mean that you thought me so silly."
    assert all(o.no_speech_prob is not None for o in beam.values())
