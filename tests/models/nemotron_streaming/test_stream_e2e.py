"""A LibriSpeech test-other clip streamed end to end below the recognizer: audio in uneven
pieces -> ``parakeet_logmel_streaming`` (+ flush) -> chunks of the model's sizes (the last one
zero-padded) -> the ``stateful`` runtime -> ``TransducerGreedyStream``. The tokens equal
transformers' streaming ``generate`` over chunks cut from its own feature extractor's output
(random weights: token identity, not WER)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

tf = pytest.importorskip("transformers", reason="pip install 'transformers>=5.24'")
if not hasattr(tf, "NemotronAsrStreamingForRNNT"):
    pytest.skip("transformers has no NemotronAsrStreamingForRNNT; pip install "
                "'transformers>=5.24'", allow_module_level=True)

from oasr.engine.decode.transducer_streaming import TransducerGreedyStream  # noqa: E402
from oasr.engine.streaming_backend import build_streaming_backend  # noqa: E402
from oasr.features.parakeet_streaming import (  # noqa: E402
    parakeet_logmel_flush,
    parakeet_logmel_streaming,
)
from oasr.models.loader import load_pretrained  # noqa: E402
from oasr.models.registry import detect_converter  # noqa: E402
from tests.helpers.data import SHARED_DATA  # noqa: E402
from tests.models.fastconformer.reference import hf_hypotheses  # noqa: E402
from tests.models.nemotron_streaming.hf_tiny import VOCAB, save_hf  # noqa: E402

AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio" / "1688-142285-0002.flac"
BLANK = VOCAB - 1


def _cut(feats: torch.Tensor, first: int, per: int) -> list[torch.Tensor]:
    """(T, F) -> the model's chunks, the last zero-padded to its size."""
    out, pos, size = [], 0, first
    while pos < feats.shape[0]:
        c = feats[pos:pos + size]
        if c.shape[0] < size:
            c = torch.cat([c, c.new_zeros(size - c.shape[0], c.shape[1])])
        out.append(c)
        pos, size = pos + size, per
    return out


def test_librispeech_clip_streams_to_the_reference_tokens(tmp_path: Path) -> None:
    if not AUDIO.is_file():
        pytest.skip(f"{AUDIO} (LibriSpeech test-other) is not on this machine")
    src = tmp_path / "hf"
    hf = save_hf(src, blank_bias=0.0)
    detect_converter(src).convert(src, tmp_path / "bundle")
    loaded = load_pretrained(str(tmp_path / "bundle"))
    assert loaded.architecture == "nemotron_streaming"
    model, feat_cfg = loaded.model, loaded.feature_config
    cfg = model.config
    first, per = cfg.first_chunk_features(), cfg.chunk_features()
    wav = sf.read(str(AUDIO), dtype="float32")[0]

    rng = np.random.default_rng(0)
    state, pieces, pos = None, [], 0
    while pos < len(wav):
        n = int(rng.integers(1, 4000))
        feats, state = parakeet_logmel_streaming(torch.from_numpy(wav[pos:pos + n]), state,
                                                 feat_cfg)
        pieces.append(feats)
        pos += n
    pieces.append(parakeet_logmel_flush(state, feat_cfg))
    ours_feats = torch.cat(pieces)

    backend = build_streaming_backend(model)
    backend.allocate(0)
    search = TransducerGreedyStream(model.predictor, model.joiner, cfg.max_symbols_per_step)
    with torch.no_grad():
        for c in _cut(ours_feats, first, per):
            out, lens = backend.forward_step([0], c[None], torch.tensor([c.shape[0]]))
            search.feed(out[0, :int(lens[0])])
        fe = tf.NemotronAsrStreamingFeatureExtractor(feature_size=16)
        ref_in = fe(wav, sampling_rate=16000, return_tensors="pt")
        ref_feats = ref_in.input_features[0, :int(ref_in.attention_mask.sum())]
        assert ref_feats.shape == ours_feats.shape
        torch.testing.assert_close(ours_feats, ref_feats, atol=1e-4, rtol=1e-4)
        chunks = [c[None] for c in _cut(ref_feats, first, per)]
        gen = hf.generate(input_features=(c for c in chunks), decoder_start_token_id=BLANK,
                          num_lookahead_tokens=cfg.lookahead)
    hyp = search.best()
    assert hyp.tokens
    assert [(hyp.tokens, hyp.frames)] == hf_hypotheses(gen, torch.tensor([search.frame]), BLANK)
