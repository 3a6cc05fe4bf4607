"""A tiny random Whisper twice: transformers' ``WhisperForConditionalGeneration`` (the oracle)
and the matching oasr ``LoadedModel`` holding the very same weights.

Vocabulary layout (100 ids): 0-1 ordinary but suppressed, 2 = ``<|endoftext|>`` (eos and pad),
3 = ``<|startoftranscript|>``, 4 = ``<|notimestamps|>`` (English-only) ... the multilingual
variant adds language ids (en/es/de) and task ids after them; every special id is suppressed, so
generated tokens are ordinary text ids, and the "space" id 20 and eos are suppressed first.

The encoder window is ``2 * max_source_positions`` = 40 frames = 0.4 s of audio at a 10 ms hop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oasr.features import FeatureConfig
from oasr.models.loader import LoadedModel
from oasr.models.whisper.config import WhisperConfig
from oasr.models.whisper.model import WhisperModel

VOCAB = 100
N_MELS = 8
MAX_SOURCE = 20
MAX_TARGET = 64
SAMPLE_RATE = 16000
WINDOW_SECONDS = 2 * MAX_SOURCE * 0.010  # 0.4 s
WINDOW_SAMPLES = round(WINDOW_SECONDS * SAMPLE_RATE)

EOS = 2
SOT = 3
SPACE = 20
LANGS = {"en": 5, "es": 6, "de": 7}
TASKS = {"transcribe": 8, "translate": 9}


class JoinTokenizer:
    """ids -> ``" ".join`` of their numbers: enough for a model without a real vocabulary."""

    vocab_size = VOCAB

    def decode(self, ids: Any) -> str:
        return " ".join(str(int(i)) for i in ids)


@dataclass
class TinyWhisper:
    hf: Any  # transformers.WhisperForConditionalGeneration, eval, fp32
    loaded: LoadedModel
    config: WhisperConfig

    @property
    def prompt(self) -> list[int]:
        return list(self.config.sot_sequence)


def _oasr_config(multilingual: bool) -> WhisperConfig:
    if multilingual:
        no_ts = 10
        sot_sequence = [SOT, LANGS["en"], TASKS["transcribe"], no_ts]
        lang_to_id, task_to_id = dict(LANGS), dict(TASKS)
    else:
        no_ts = 4
        sot_sequence = [SOT, no_ts]
        lang_to_id, task_to_id = {}, {}
    specials = [SOT, no_ts, *lang_to_id.values(), *task_to_id.values()]
    cfg = WhisperConfig(
        n_mels=N_MELS, vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_source_positions=MAX_SOURCE, max_target_positions=MAX_TARGET,
        decoder_start_token_id=SOT, eos_token_id=EOS, pad_token_id=EOS,
        no_timestamps_token_id=no_ts, sot_sequence=sot_sequence,
        suppress_tokens=sorted({0, 1, *specials}), begin_suppress_tokens=[SPACE, EOS],
        lang_to_id=lang_to_id, task_to_id=task_to_id, is_multilingual=multilingual,
    )
    cfg.validate()
    return cfg


def build_tiny_whisper(seed: int = 0, multilingual: bool = False,
                       eos_bias: float = 0.0) -> TinyWhisper:
    """Random weights from ``seed``; ``eos_bias`` > 0 pushes the final layer norm's bias toward
    the eos embedding so rows end at input-dependent lengths instead of running to the cap."""
    from transformers import WhisperConfig as HfWhisperConfig
    from transformers import WhisperForConditionalGeneration

    cfg = _oasr_config(multilingual)
    hf_cfg = HfWhisperConfig(
        vocab_size=VOCAB, num_mel_bins=N_MELS, d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.encoder_attention_heads,
        decoder_attention_heads=cfg.decoder_attention_heads,
        encoder_ffn_dim=cfg.encoder_ffn_dim, decoder_ffn_dim=cfg.decoder_ffn_dim,
        max_source_positions=MAX_SOURCE, max_target_positions=MAX_TARGET,
        pad_token_id=EOS, bos_token_id=EOS, eos_token_id=EOS, decoder_start_token_id=SOT,
        suppress_tokens=None, begin_suppress_tokens=None, activation_function="gelu",
        scale_embedding=False, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    hf = WhisperForConditionalGeneration(hf_cfg).eval()
    with torch.no_grad():
        # Default init is too flat for a 100-id vocabulary: widen it so argmaxes are decisive
        # and not decided by rounding.
        for name, p in hf.named_parameters():
            if name.endswith("weight") and p.dim() >= 2:
                p.normal_(0.0, 0.3)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
        if eos_bias:
            emb = hf.model.decoder.embed_tokens.weight
            hf.model.decoder.layer_norm.bias.add_(eos_bias * emb[EOS] / emb[EOS].norm())
    hf.generation_config.suppress_tokens = None
    hf.generation_config.begin_suppress_tokens = None

    model = WhisperModel(cfg)
    state = {k.removeprefix("model."): v.clone() for k, v in hf.state_dict().items()
             if k != "proj_out.weight"}
    model.load_weights(state)
    model.eval()
    feature_config = FeatureConfig("whisper_logmel", num_mel_bins=N_MELS,
                                   params={"chunk_seconds": WINDOW_SECONDS})
    loaded = LoadedModel(model=model, tokenizer=JoinTokenizer(), feature_config=feature_config,
                         name=f"tiny-whisper-{seed}", architecture="whisper")
    return TinyWhisper(hf, loaded, cfg)


def random_audio(seed: int, seconds: float = WINDOW_SECONDS) -> np.ndarray:
    """Band-limited noise with a random tone: (N,) float32 at 16 kHz, N <= the window."""
    rng = np.random.default_rng(seed)
    n = min(round(seconds * SAMPLE_RATE), WINDOW_SAMPLES)
    t = np.arange(n) / SAMPLE_RATE
    tone = np.sin(2 * np.pi * rng.uniform(100, 4000) * t) * rng.uniform(0.05, 0.5)
    return (tone + 0.1 * rng.standard_normal(n)).astype(np.float32)


def features_for(audio: list[np.ndarray], feature_config: FeatureConfig) -> torch.Tensor:
    """The engine's own features for ``audio`` (B, frames, n_mels) fp32, each row alone."""
    from oasr.features.whisper_logmel import whisper_logmel

    rows = []
    for a in audio:
        wav = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))[None]
        feats, _ = whisper_logmel(wav, torch.tensor([wav.shape[1]]), feature_config)
        rows.append(feats)
    return torch.cat(rows)
