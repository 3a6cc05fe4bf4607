"""Peer systems ``oasr bench`` measures ours against: transformers' ``generate`` (Whisper here;
Parakeet CTC / TDT in ``oasr.bench.parakeet_peer``, chosen by the model's architecture) and
faster-whisper (CTranslate2, ``oasr.bench.faster_whisper_peer``).

The Whisper peer holds *our* converted weights (``oasr.models.loader.load_pretrained``) loaded into
transformers' ``WhisperForConditionalGeneration``, so it differs from our engine only in the
implementation, never in the checkpoint. Decoding is greedy with our config's prompt and
suppression lists (a precomputed-mask ``LogitsProcessor``, same tokens as transformers' own);
features come from transformers' ``WhisperFeatureExtractor`` set to our frontend's window, hop
and FFT size. The parity scripts (``scripts/make_transformers_reference.py``) and the GPU
benchmark import this module too, so there is one copy of the peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from oasr.bench.parakeet_peer import PARAKEET_ARCHITECTURES
from oasr.engine.config import DEFAULT_MAX_NEW_TOKENS

__all__ = [
    "MAX_NEW_TOKENS",
    "PEERS",
    "SuppressMask",
    "TRANSFORMERS_ARCHITECTURES",
    "TransformersWhisper",
    "build_peer",
    "check_transformers_peer",
    "build_transformers_whisper",
    "suppress_processors",
    "whisper_feature_extractor",
]

MAX_NEW_TOKENS = DEFAULT_MAX_NEW_TOKENS


class SuppressMask:
    """A ``LogitsProcessor`` setting ``ids`` to -inf (at every step, or only at ``begin_index``).

    transformers' own ``SuppressTokens*LogitsProcessor`` rebuild their mask with ``torch.isin``
    on every step, which on a busy two-core CPU costs more than the decoder step itself; the
    mask is the same, so this one is built once.
    """

    def __init__(self, ids: list[int], vocab_size: int, begin_index: int | None = None) -> None:
        import torch

        self.mask = torch.zeros(vocab_size, dtype=torch.bool)
        self.mask[torch.tensor(sorted(set(ids)), dtype=torch.long)] = True
        self.begin_index = begin_index

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        # input_ids: (B, L) tokens so far; scores: (B, V) next-token logits.
        if self.begin_index is not None and input_ids.shape[1] != self.begin_index:
            return scores
        return scores.masked_fill(self.mask.to(scores.device), float("-inf"))


def build_transformers_whisper(lm: Any, max_new_tokens: int = MAX_NEW_TOKENS
                               ) -> tuple[Any, Any]:
    """(WhisperForConditionalGeneration, GenerationConfig) holding ``lm``'s weights, fp32, eval.

    Suppression is not in the generation config: ``suppress_processors`` supplies it.
    ``max_new_tokens`` is capped so prompt + new tokens fit the decoder's positions (transformers
    refuses more).
    """
    import transformers

    c = lm.model.config
    hf_config = transformers.WhisperConfig(
        vocab_size=c.vocab_size,
        num_mel_bins=c.n_mels,
        d_model=c.d_model,
        encoder_layers=c.encoder_layers,
        encoder_attention_heads=c.encoder_attention_heads,
        decoder_layers=c.decoder_layers,
        decoder_attention_heads=c.decoder_attention_heads,
        encoder_ffn_dim=c.encoder_ffn_dim,
        decoder_ffn_dim=c.decoder_ffn_dim,
        max_source_positions=c.max_source_positions,
        max_target_positions=c.max_target_positions,
        decoder_start_token_id=c.decoder_start_token_id,
        bos_token_id=c.decoder_start_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
        # Suppression comes from ``suppress_processors``; None keeps transformers' defaults out.
        suppress_tokens=None,
        begin_suppress_tokens=None,
        tie_word_embeddings=True,
    )
    model = transformers.WhisperForConditionalGeneration(hf_config)
    state = {"model." + k: v for k, v in lm.model.state_dict().items()}
    state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"weight names do not match: missing={missing} "
                           f"unexpected={unexpected}")
    model = model.float().eval()

    room = c.max_target_positions - len(c.sot_sequence)
    gen = transformers.GenerationConfig(
        decoder_start_token_id=c.decoder_start_token_id,
        bos_token_id=c.decoder_start_token_id,
        eos_token_id=c.eos_token_id,
        pad_token_id=c.pad_token_id,
        no_timestamps_token_id=c.no_timestamps_token_id,
        is_multilingual=c.is_multilingual,
        max_new_tokens=max(1, min(max_new_tokens, room)),
        num_beams=1,
        do_sample=False,
        return_timestamps=False,
    )
    model.generation_config = gen
    return model, gen


def suppress_processors(lm: Any) -> Any:
    """Our config's ``suppress_tokens`` (every step) and ``begin_suppress_tokens`` (first step)."""
    import transformers

    c = lm.model.config
    procs = []
    if c.suppress_tokens:
        procs.append(SuppressMask(list(c.suppress_tokens), c.vocab_size))
    if c.begin_suppress_tokens:
        procs.append(SuppressMask(list(c.begin_suppress_tokens), c.vocab_size,
                                  begin_index=len(c.sot_sequence)))
    return transformers.LogitsProcessorList(procs)


def whisper_feature_extractor(lm: Any) -> Any:
    """transformers' ``WhisperFeatureExtractor`` matching ``lm``'s frontend (window, hop, FFT).

    For a real Whisper checkpoint (30 s, 10 ms hop, 25 ms frames) this is transformers' default.
    """
    import transformers

    fc = lm.feature_config
    sr = fc.sample_rate
    window_s = fc.fixed_window_seconds or 30.0
    return transformers.WhisperFeatureExtractor(
        feature_size=lm.model.config.n_mels, sampling_rate=sr,
        hop_length=round(fc.frame_shift_ms * sr / 1000),
        n_fft=round(fc.frame_length_ms * sr / 1000),
        chunk_length=int(window_s) if float(window_s).is_integer() else window_s,
    )


class TransformersWhisper:
    """Greedy batch transcription with transformers (features included).

    ``device`` / ``dtype``: where the model runs (fp32 CPU by default); ``attn_implementation``
    e.g. ``"sdpa"`` (None keeps transformers' choice).
    """

    name = "transformers"
    features = "transformers WhisperFeatureExtractor (cpu)"

    def __init__(self, lm: Any, device: str = "cpu", dtype: Any = None,
                 attn_implementation: str | None = None,
                 max_new_tokens: int = MAX_NEW_TOKENS) -> None:
        import torch

        self.lm = lm
        self.device = device
        self.dtype = dtype or torch.float32
        self.model, self.gen = build_transformers_whisper(lm, max_new_tokens)
        self.model = self.model.to(device, self.dtype).eval()
        if attn_implementation is not None:
            self.model.config._attn_implementation = attn_implementation
        self.processors = suppress_processors(lm)
        for p in self.processors:
            p.mask = p.mask.to(device)
        self.fe = whisper_feature_extractor(lm)
        self.prompt = list(lm.model.config.sot_sequence)

    def transcribe_with_counts(self, audios: list[np.ndarray]) -> tuple[list[str], int]:
        """Texts of ``audios`` (each (N,) float32 at the model's rate) and tokens generated."""
        import torch

        with torch.inference_mode():
            feats = self.fe(audios, sampling_rate=self.fe.sampling_rate,
                            return_tensors="pt").input_features  # (B, n_mels, frames)
            feats = feats.to(self.device, self.dtype)
            prompt = torch.tensor([self.prompt] * len(audios), dtype=torch.long,
                                  device=self.device)
            ids = self.model.generate(feats, decoder_input_ids=prompt,
                                      generation_config=self.gen,
                                      logits_processor=self.processors)  # (B, L)
        eos = self.gen.eos_token_id
        texts, n = [], 0
        for row in ids.tolist():
            # Some transformers releases return the prompt with the sequence, others do not.
            row = row[len(self.prompt):] if row[:len(self.prompt)] == self.prompt else row
            row = row[:row.index(eos)] if eos in row else row
            n += len(row)
            texts.append(self.lm.tokenizer.decode(row).strip())
        return texts, n

    def transcribe(self, audios: list[np.ndarray]) -> list[str]:
        return self.transcribe_with_counts(audios)[0]


def check_transformers_peer(architecture: str, source: str) -> None:
    """ValueError when the transformers peer cannot run ``architecture`` from ``source`` (what
    ``--model`` named): an architecture it has no peer for, or a Parakeet source that is not a
    transformers checkpoint folder."""
    from oasr.bench.parakeet_peer import parakeet_folder

    if architecture in PARAKEET_ARCHITECTURES:
        parakeet_folder(source)
    elif architecture and architecture != "whisper":
        raise ValueError(f"the transformers peer runs {', '.join(TRANSFORMERS_ARCHITECTURES)} "
                         f"models; {source or 'the model'} is {architecture!r}")


def _transformers_peer(lm: Any, device: str, dtype: Any, max_new_tokens: int,
                       source: str = "") -> Any:
    """Whisper on ``lm``'s weights; Parakeet from ``source``'s transformers folder (``lm`` None:
    the caller did not load ours, ``peer_needs_weights``). ValueError for any other
    architecture, or a Parakeet source that is not a transformers folder."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise RuntimeError("--compare transformers needs transformers: pip install transformers")
    from oasr.bench.parakeet_peer import build_transformers_parakeet

    architecture = lm.architecture if lm is not None else ""
    source = source or (lm.name if lm is not None else "")
    check_transformers_peer(architecture, source)
    if lm is None or architecture in PARAKEET_ARCHITECTURES:
        return build_transformers_parakeet(source, device, dtype)
    attn = "sdpa" if str(device).startswith("cuda") else None
    return TransformersWhisper(lm, device=device, dtype=dtype, attn_implementation=attn,
                               max_new_tokens=max_new_tokens)


def _faster_whisper_peer(int8: bool) -> Callable[..., Any]:
    def build(lm: Any, device: str, dtype: Any, max_new_tokens: int, source: str = "",
              threads: int = 0) -> Any:
        from oasr.bench.faster_whisper_peer import build_faster_whisper

        return build_faster_whisper(source, device, dtype, max_new_tokens, int8=int8,
                                    threads=threads)

    return build


# Peer name -> factory(lm, device, dtype, max_new_tokens, source=, threads=) returning an
# object with ``name`` and ``transcribe_with_counts(audios) -> (texts, tokens)`` (and, where
# known, ``features``: the frontend it ran). ``lm`` is our loaded model (None for a peer that
# reads the source itself: WEIGHTLESS_PEERS, and transformers on a Parakeet model, which loads
# transformers' own checkpoint: ``peer_needs_weights``); ``threads``: the CPU threads a peer
# with a pool of its own uses (0: its default; torch peers follow torch.set_num_threads, which
# the caller sets).
PEERS: dict[str, Callable[..., Any]] = {
    "transformers": lambda lm, device, dtype, max_new_tokens, source="", threads=0: (
        _transformers_peer(lm, device, dtype, max_new_tokens, source)),
    "faster-whisper": _faster_whisper_peer(int8=False),
    "faster-whisper-int8": _faster_whisper_peer(int8=True),
}
WEIGHTLESS_PEERS = ("faster-whisper", "faster-whisper-int8")
# Architectures ``--compare transformers`` runs (Parakeet from the transformers folder itself).
TRANSFORMERS_ARCHITECTURES = ("whisper", *PARAKEET_ARCHITECTURES)


def peer_needs_weights(name: str, architecture: str = "") -> bool:
    """Whether the peer is built from our loaded model (else from the source folder):
    ``architecture`` is the model's, which picks the transformers peer's family."""
    if name == "transformers":
        return architecture not in PARAKEET_ARCHITECTURES
    return name not in WEIGHTLESS_PEERS


def build_peer(name: str, lm: Any, device: str, dtype: Any,
               max_new_tokens: int = MAX_NEW_TOKENS, source: str = "", threads: int = 0) -> Any:
    """The peer ``name`` on ``lm``'s weights (or ``source``'s files), on ``threads`` CPU
    threads (0: its default); ValueError naming the valid peers if unknown."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; valid: {', '.join(sorted(PEERS))}")
    return PEERS[name](lm, device, dtype, max_new_tokens, source=source, threads=threads)
