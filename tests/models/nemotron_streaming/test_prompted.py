"""The language-prompted Nemotron (transformers' ``Nemotron3_5AsrForRNNT``): a tiny random
checkpoint saved in the upstream layout (its processor's ``prompt_dictionary`` beside it),
converted by our converter. The target language conditions every encoder frame: offline greedy
and ``oasr transcribe --language`` equal its ``generate`` with ``prompt_ids``; streamed, two
streams with different languages in one cohort each equal its streaming ``generate``; an
unknown language is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.24'")
if not hasattr(tf, "Nemotron3_5AsrForRNNT"):
    pytest.skip("transformers has no Nemotron3_5AsrForRNNT; pip install 'transformers>=5.24'",
                allow_module_level=True)

from oasr.cli.app import app  # noqa: E402
from oasr.engine.config import EngineConfig  # noqa: E402
from oasr.engine.decode.transducer_search import greedy_search  # noqa: E402
from oasr.engine.engine import ASREngine  # noqa: E402
from oasr.models.registry import build_model_from_checkpoint, detect_converter  # noqa: E402
from oasr.streaming import StreamingRecognizer, StreamOptions  # noqa: E402
from oasr.vad.endpointer import EndpointConfig  # noqa: E402
from tests.helpers.data import SHARED_DATA  # noqa: E402
from tests.models.fastconformer.reference import hf_hypotheses  # noqa: E402
from tests.models.nemotron_streaming.hf_tiny import PROMPTS, VOCAB, save_hf_prompted  # noqa: E402

BLANK = VOCAB - 1
AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
CLIP = AUDIO / "1688-142285-0002.flac"


@pytest.fixture(scope="module")
def prompted(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("prompted")
    hf = save_hf_prompted(root / "hf")
    detect_converter(root / "hf").convert(root / "hf", root / "bundle")
    return hf, root / "hf", root / "bundle"


def _audio() -> np.ndarray:
    if not CLIP.is_file():
        pytest.skip(f"{CLIP} (LibriSpeech test-other) is not on this machine")
    return sf.read(str(CLIP), dtype="float32")[0]


def _reference_feats(audio: np.ndarray) -> torch.Tensor:
    fe = tf.NemotronAsrStreamingFeatureExtractor(feature_size=16)
    inputs = fe(audio, sampling_rate=16000, return_tensors="pt")
    return inputs.input_features[0, :int(inputs.attention_mask.sum())]


def _text(src: Path, ids: list[int]) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(src / "tokenizer.json")).decode(ids).strip()


def test_offline_prompt_matches_generate(prompted) -> None:
    hf, src, _ = prompted
    conv = detect_converter(src)
    assert type(conv).__name__ == "HfNemotronPromptedConverter"
    ours = build_model_from_checkpoint(src).eval()
    assert ours.config.num_prompts == 128 and ours.config.prompt_dictionary == PROMPTS
    assert "language" in ours.encoder_options()
    torch.manual_seed(1)
    lens = torch.tensor([161, 120])
    mask = torch.arange(161)[None] < lens[:, None]
    feats = torch.randn(2, 161, 16) * mask[..., None]
    got = {}
    with torch.no_grad():
        hidden, hidden_lens = ours.encode_offline(feats, lens)
        for lang in ("de", "en", None):
            kw = {} if lang is None else {"prompt_ids": torch.tensor([PROMPTS[lang]] * 2)}
            out = hf.generate(feats, attention_mask=mask.long(), decoder_start_token_id=BLANK,
                              num_lookahead_tokens=1, max_new_tokens=2000, **kw)
            h = ours.apply_prompt(hidden, [lang, lang])
            hyps = greedy_search(ours.predictor, ours.joiner, h, hidden_lens,
                                 max_sym_per_frame=ours.config.max_symbols_per_step)
            want = hf_hypotheses(out, hidden_lens, BLANK)
            assert [(x.tokens, x.frames) for x in hyps] == want
            got[lang] = want
        # rows with different languages in one batch
        mixed = greedy_search(ours.predictor, ours.joiner,
                              ours.apply_prompt(hidden, ["de", "en"]), hidden_lens,
                              max_sym_per_frame=ours.config.max_symbols_per_step)
    assert got["de"][0][0] and got["de"] != got["en"] != got[None]  # the prompt matters
    assert [(x.tokens, x.frames) for x in mixed] == [got["de"][0], got["en"][1]]
    with pytest.raises(ValueError, match="not in this checkpoint's prompt dictionary"):
        ours.prompt_slots(["xx"])


def test_transcribe_with_language_matches_generate(prompted, tmp_path) -> None:
    hf, src, bundle = prompted
    audio = _audio()
    feats = _reference_feats(audio)[None]
    with torch.no_grad():
        out = hf.generate(feats, decoder_start_token_id=BLANK, num_lookahead_tokens=1,
                          max_new_tokens=6000, prompt_ids=torch.tensor([PROMPTS["de"]]))
        n = hf.encoder._get_subsampling_output_length(torch.tensor([feats.shape[1]]))
    want = _text(src, hf_hypotheses(out, n, BLANK)[0][0])
    assert want
    runner = CliRunner()
    dst = tmp_path / "de.jsonl"
    res = runner.invoke(app, ["transcribe", str(CLIP), "--model", str(bundle), "--no-progress",
                              "--language", "de", "-o", str(dst)])
    assert res.exit_code == 0, res.output
    assert json.loads(dst.read_text().splitlines()[0])["text"] == want
    res = runner.invoke(app, ["transcribe", str(CLIP), "--model", str(bundle), "--no-progress",
                              "--language", "xx", "-o", str(tmp_path / "xx.jsonl")])
    assert res.exit_code != 0
    assert "prompt dictionary" in res.output + str(res.exception)


def test_streams_condition_on_their_own_language(prompted) -> None:
    hf, src, bundle = prompted
    audio = _audio()
    engine = ASREngine(EngineConfig(model=str(bundle), device="cpu"))
    rec = StreamingRecognizer(engine, StreamOptions(endpoint=EndpointConfig(enabled=False)))
    with pytest.raises(ValueError, match="prompt dictionary"):
        rec.create_stream(StreamOptions(language="xx"))
    langs = ["de", None]
    streams = [rec.create_stream(StreamOptions(endpoint=EndpointConfig(enabled=False),
                                               language=lang)) for lang in langs]
    rng = np.random.default_rng(2)
    pos, finals = 0, [[] for _ in streams]
    while pos < len(audio):
        n = int(rng.choice([0, 1, 640, 3000]))
        for s in streams:
            s.accept_waveform(16000, audio[pos:pos + n])
        pos += n
        if pos >= len(audio):
            for s in streams:
                s.input_finished()
        while any(rec.is_ready(s) for s in streams):
            rec.decode_streams(streams)  # both streams in one cohort
            for i, s in enumerate(streams):
                if rec.is_endpoint(s):
                    finals[i].append(rec.get_result(s).committed)
                    rec.reset(s)
    feats = _reference_feats(audio)
    first, per = 1 + 8 * 1, 8 * 2
    chunks, p, size = [], 0, first
    while p < feats.shape[0]:
        c = feats[p:p + size]
        chunks.append(torch.cat([c, c.new_zeros(size - c.shape[0], c.shape[1])])[None])
        p, size = p + size, per
    wants = []
    for lang in langs:
        kw = {} if lang is None else {"prompt_ids": torch.tensor([PROMPTS[lang]])}
        with torch.no_grad():
            gen = hf.generate(input_features=(c for c in chunks), decoder_start_token_id=BLANK,
                              num_lookahead_tokens=1, **kw)
        wants.append(_text(src, hf_hypotheses(gen, torch.tensor([2 * len(chunks)]),
                                              BLANK)[0][0]))
    assert all(wants) and wants[0] != wants[1]
    assert finals == [[w] for w in wants]


def test_cli_streams_with_a_language(prompted, tmp_path) -> None:
    hf, src, bundle = prompted
    audio = _audio()
    feats = _reference_feats(audio)
    chunks, p, size = [], 0, 9
    while p < feats.shape[0]:
        c = feats[p:p + size]
        chunks.append(torch.cat([c, c.new_zeros(size - c.shape[0], c.shape[1])])[None])
        p, size = p + size, 16
    with torch.no_grad():
        gen = hf.generate(input_features=(c for c in chunks), decoder_start_token_id=BLANK,
                          num_lookahead_tokens=1, prompt_ids=torch.tensor([PROMPTS["fr"]]))
    want = _text(src, hf_hypotheses(gen, torch.tensor([2 * len(chunks)]), BLANK)[0][0])
    out = tmp_path / "fr.jsonl"
    res = CliRunner().invoke(app, ["stream", str(CLIP), "--model", str(bundle), "--device",
                                   "cpu", "--no-endpoint", "--language", "fr", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert want and [json.loads(x)["text"] for x in out.read_text().splitlines()] == [want]
