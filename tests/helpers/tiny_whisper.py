"""A tiny random Whisper twice: transformers' ``WhisperForConditionalGeneration`` (the oracle)
and the matching oasr ``LoadedModel`` holding the very same weights.

Vocabulary (100 ids): 2 = ``<|endoftext|>`` (eos and pad), 3 = ``<|startoftranscript|>``, then
``<|notimestamps|>`` (4) for the English-only variant, or the language ids (en/es/de = 5/6/7),
the task ids (transcribe/translate = 8/9) and ``<|notimestamps|>`` (10) for the multilingual
one. With ``suppress=True`` (the default) the special ids and 0-1 are suppressed every step and
eos and the "space" id 20 on the first generated token, so outputs are ordinary ids.

The encoder window is ``2 * max_source_positions`` = 40 frames = 0.4 s of audio at a 10 ms hop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request, RequestOutput
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
    """ids -> their numbers joined by spaces: enough for a model without a real vocabulary."""

    vocab_size = VOCAB

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(str(int(i)) for i in ids)


def parse_ids(text: str) -> list[int]:
    """The inverse of ``JoinTokenizer.decode``."""
    return [int(t) for t in text.split()]


class PromptTokenizer(JoinTokenizer):
    """``JoinTokenizer`` that also encodes (``" 11 12"`` -> ``[11, 12]``) and declares
    ``<|startofprev|>`` (id 1, suppressed like the other specials), so prompts, prefixes and
    hotwords can be given to the tiny model as id lists."""

    sot_prev = 1

    def encode(self, text: str) -> list[int]:
        return parse_ids(text)


@dataclass
class TinyWhisper:
    hf: Any  # transformers.WhisperForConditionalGeneration (eval, fp32) or None
    loaded: LoadedModel
    config: WhisperConfig

    @property
    def model(self) -> WhisperModel:
        return self.loaded.model

    @property
    def prompt(self) -> list[int]:
        return list(self.config.sot_sequence)


def tiny_whisper_config(multilingual: bool = False, suppress: bool = True) -> WhisperConfig:
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
        suppress_tokens=sorted({0, 1, *specials}) if suppress else [],
        begin_suppress_tokens=[SPACE, EOS] if suppress else [],
        lang_to_id=lang_to_id, task_to_id=task_to_id, is_multilingual=multilingual,
    )
    cfg.validate()
    return cfg


def build_tiny_whisper(seed: int = 0, multilingual: bool = False, eos_bias: float = 0.0,
                       suppress: bool = True, with_hf: bool = True) -> TinyWhisper:
    """Random weights from ``seed``; ``with_hf=False`` skips transformers (``hf`` is None) and
    draws different weights from the same distribution.

    ``eos_bias`` > 0 adds that much of the eos embedding's direction to the decoder's final
    layer-norm bias, so rows end at input-dependent lengths instead of running to their cap.
    """
    cfg = tiny_whisper_config(multilingual, suppress)
    model = WhisperModel(cfg).eval()
    hf = _build_hf(cfg, seed, eos_bias) if with_hf else None
    with torch.no_grad():
        if hf is not None:
            state = {k.removeprefix("model."): v.clone() for k, v in hf.state_dict().items()
                     if k != "proj_out.weight"}
            model.load_weights(state)
        else:
            torch.manual_seed(seed)
            _widen(model, eos_bias, model.decoder.embed_tokens.weight,
                   model.decoder.layer_norm.bias)
    feature_config = FeatureConfig("whisper_logmel", num_mel_bins=N_MELS,
                                   params={"chunk_seconds": WINDOW_SECONDS})
    loaded = LoadedModel(model=model, tokenizer=JoinTokenizer(), feature_config=feature_config,
                         name=f"tiny-whisper-{seed}", architecture="whisper")
    return TinyWhisper(hf, loaded, cfg)


def _widen(module: torch.nn.Module, eos_bias: float, embed: torch.Tensor,
           final_norm_bias: torch.Tensor) -> None:
    # The default init is too flat for a 100-id vocabulary: widen it so argmaxes are decisive
    # rather than decided by rounding.
    for name, p in module.named_parameters():
        if name.endswith("weight") and p.dim() >= 2:
            p.normal_(0.0, 0.3)
        elif name.endswith("bias"):
            p.normal_(0.0, 0.1)
    if eos_bias:
        final_norm_bias.add_(eos_bias * embed[EOS] / embed[EOS].norm())


def _build_hf(cfg: WhisperConfig, seed: int, eos_bias: float) -> Any:
    import transformers
    from transformers import WhisperConfig as HfWhisperConfig
    from transformers import WhisperForConditionalGeneration

    transformers.logging.set_verbosity_error()
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
        _widen(hf, eos_bias, hf.model.decoder.embed_tokens.weight,
               hf.model.decoder.layer_norm.bias)
    # The head is the token embedding, so the weights copied from it are the whole model.
    assert hf.proj_out.weight.data_ptr() == hf.model.decoder.embed_tokens.weight.data_ptr()
    hf.generation_config.suppress_tokens = None
    hf.generation_config.begin_suppress_tokens = None
    return hf


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` intra-op threads: a tiny model's GEMMs only lose to thread hand-offs."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def random_audio(seed: int) -> np.ndarray:
    """0.05-0.4 s of a few random tones in noise: (N,) float32 at 16 kHz, N <= the window."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(WINDOW_SAMPLES // 8, WINDOW_SAMPLES + 1))
    t = np.arange(n) / SAMPLE_RATE
    x = rng.uniform(0.01, 0.3) * rng.standard_normal(n)
    for _ in range(int(rng.integers(1, 4))):
        x += rng.uniform(0.05, 0.5) * np.sin(2 * np.pi * rng.uniform(80, 7000) * t
                                             + rng.uniform(0, 2 * np.pi))
    return x.astype(np.float32)


def features_for(audio: Sequence[np.ndarray], feature_config: FeatureConfig) -> torch.Tensor:
    """The engine's features for ``audio``: (B, frames, n_mels) fp32, each row alone."""
    from oasr.features.whisper_logmel import whisper_logmel

    rows = []
    for a in audio:
        wav = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))[None]
        feats, _ = whisper_logmel(wav, torch.tensor([wav.shape[1]]), feature_config)
        rows.append(feats)
    return torch.cat(rows)


def hf_generate(tw: TinyWhisper, feats: torch.Tensor, prompts: Sequence[Sequence[int]],
                max_new_tokens: int, **kwargs: Any) -> list[list[int]]:
    """transformers' ``generate`` on our features (B, T, n_mels) with the checkpoint's logit
    suppression; each row's generated ids with the prompt and everything from eos dropped."""
    cfg = tw.config
    with torch.no_grad():
        seqs = tw.hf.generate(
            feats.transpose(1, 2), decoder_input_ids=torch.tensor([list(p) for p in prompts]),
            max_new_tokens=max_new_tokens, suppress_tokens=cfg.suppress_tokens or None,
            begin_suppress_tokens=cfg.begin_suppress_tokens or None, **kwargs,
        )
    out = []
    for p, s in zip(prompts, seqs.tolist()):
        if s[:len(p)] == list(p):  # some transformers releases return the prompt too
            s = s[len(p):]
        out.append(s[:s.index(EOS)] if EOS in s else s)
    return out


def run_engine(loaded: LoadedModel, audio: Sequence[np.ndarray],
               decodings: Sequence[DecodingOptions | None] | None = None,
               **config: Any) -> dict[str, RequestOutput]:
    """Decode ``audio`` (request ids "0", "1", ...) through ``ASREngine.run`` on the CPU."""
    decodings = decodings or [None] * len(audio)
    engine = ASREngine(EngineConfig(device="cpu", **config), loaded=loaded)
    requests = [Request(str(i), a, d or DecodingOptions())
                for i, (a, d) in enumerate(zip(audio, decodings))]
    return {o.request_id: o for o in engine.run(requests)}
