"""Whisper's prefix, hotwords and language probabilities on real checkpoints and real speech.

Oracles: transformers' ``WhisperForConditionalGeneration.generate`` holding the weights our
loader produced (the prefix forced as decoder input; hotwords as the ``prompt_ids`` faster-
whisper's placement makes of them), and a direct softmax of the decoder's logits after
``<|startoftranscript|>`` over the language tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oasr.audio import load_audio
from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from tests.helpers.data import SHARED_DATA
from tests.helpers.real_tiny_en import require_tiny_en_and_speech
from tests.helpers.tiny_whisper import torch_threads
from tests.helpers.whisper_generate import features, hf_generate

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"
MISC = SHARED_DATA / "misc" / "audio"
MAX_NEW = 48

require_tiny_en_and_speech(AUDIO)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tiny_en():
    from oasr.models.loader import load_pretrained

    return load_pretrained()  # the packaged default: Whisper tiny.en


def _speech(utterance: str) -> np.ndarray:
    return load_audio(AUDIO / f"{utterance}.flac")


def _decode(loaded, rows: list[tuple[np.ndarray, DecodingOptions]], **config) -> list:
    engine = ASREngine(EngineConfig(device="cpu", max_batch_size=len(rows),
                                    max_new_tokens=MAX_NEW, **config), loaded=loaded)
    outs = {o.request_id: o for o in engine.run(
        [Request(str(i), a, d) for i, (a, d) in enumerate(rows)])}
    assert all(o.error is None for o in outs.values()), outs
    return [outs[str(i)] for i in range(len(rows))]


def _hf_generate(loaded, samples: np.ndarray, **kwargs) -> list[int]:
    return hf_generate(loaded, samples, MAX_NEW, **kwargs)


def test_hotwords_prompt_the_rare_name_as_transformers_prompt_ids(tiny_en):
    tok = tiny_en.tokenizer
    speech = _speech("1688-142285-0005")  # "... shoppy at helstone"; tiny.en hears "Halston"
    hot, plain = _decode(tiny_en, [(speech, DecodingOptions(hotwords="Helstone")),
                                   (speech, DecodingOptions())])
    expected = _hf_generate(tiny_en, speech, prompt_ids=torch.tensor(
        [tok.sot_prev, *tok.encode(" Helstone")]))
    assert hot.token_ids == expected
    assert "Helstone" in hot.text and "Helstone" not in plain.text


def test_prefix_is_forced_as_transformers_decodes_it_and_opens_the_first_segment(tiny_en):
    cfg, tok = tiny_en.model.config, tiny_en.tokenizer
    speech = _speech("1688-142285-0001")  # "margaret said mister hale as he returned ..."
    prefix = "Margaret said Mr. Hale"
    ids = tok.encode(" " + prefix)
    out, timed = _decode(tiny_en, [(speech, DecodingOptions(prefix=prefix)),
                                   (speech, DecodingOptions(prefix=prefix, timestamps=True))])
    expected = _hf_generate(tiny_en, speech,
                            decoder_input_ids=torch.tensor([[*cfg.sot_sequence, *ids]]))
    assert out.token_ids == ids + expected
    assert out.text.startswith(prefix)
    # Timestamp mode: <|0.00|> then the prefix open the first segment.
    assert timed.token_ids[:len(ids) + 1] == [tok.timestamp_begin, *ids]
    assert timed.segments[0][0] == 0.0 and timed.segments[0][2].startswith(prefix)


def test_language_probabilities_of_whisper_base_equal_a_direct_softmax():
    from oasr.models.loader import load_pretrained

    try:
        loaded = load_pretrained("whisper-base")
    except Exception as exc:  # not cached and no network
        pytest.skip(f"whisper-base is not available here: {exc}")
    cfg = loaded.model.config
    english = _speech("1688-142285-0002")
    spanish = load_audio(MISC / "13697_11991_000000.opus", 16000)
    outs = _decode(loaded, [(english, DecodingOptions(max_new_tokens=4)),
                            (spanish, DecodingOptions(max_new_tokens=4)),
                            (english, DecodingOptions(language="en", max_new_tokens=4))])
    codes = sorted(cfg.lang_to_id, key=cfg.lang_to_id.get)
    for out, samples, code in ((outs[0], english, "en"), (outs[1], spanish, "es")):
        with torch.no_grad():
            enc = loaded.model.encode_offline(features(loaded, samples))
            logits = loaded.model.decoder.forced_logits(
                enc, torch.tensor([[cfg.decoder_start_token_id]]))[0, 0]
        direct = torch.softmax(logits[[cfg.lang_to_id[c] for c in codes]], -1).tolist()
        assert out.language == code and out.language_probability > 0.5
        got = dict(out.all_language_probs)
        assert len(got) == len(codes) == 99
        assert max(abs(got[c] - p) for c, p in zip(codes, direct)) < 1e-5
    assert outs[2].language_probability is None
