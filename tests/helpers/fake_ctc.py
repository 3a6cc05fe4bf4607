"""A tiny CTC / attention-rescoring model implementing the interface the CTC families call, and
a character tokenizer for it.

Interface: ``encode_offline(features, lengths) -> (hidden (B, T', C), hidden_lens)`` stacks
``SUBSAMPLING`` feature frames and projects them (frame-local, so padding never leaks into a
row); ``ctc_log_probs(hidden) -> (B, T', V)``; ``forward_offline`` fuses the two;
``attention_scores(hidden, hidden_lens, hyps, reverse_weight)`` scores each hypothesis with two
fixed bigram tables (left-to-right and right-to-left, end of sentence included), combined as
``(1 - w) * l2r + w * r2l``, and records every call. Frontend: whisper_logmel with a 1 s window
and a 10 ms hop, so the frame clock is 10 ms x 1 x 4 = 40 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from oasr.features import FeatureConfig
from oasr.models.base import BaseAsrModel, BaseEncoder
from oasr.models.loader import LoadedModel
from oasr.tokenizers.base import Tokenizer

N_MELS = 8
SUBSAMPLING = 4
WINDOW_SECONDS = 1.0
SECONDS_PER_FRAME = 0.010 * SUBSAMPLING
# id 0 is the blank; the last id is sos/eos.
PIECES = ["", " ", "a", "b", "c", "d", "e", "f", " g", "h", "i", "j"]
VOCAB = len(PIECES) + 1
EOS = VOCAB - 1


class CharTokenizer(Tokenizer):
    kind = "test-chars"

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.token_pieces(ids))

    def token_pieces(self, ids: Sequence[int]) -> list[str]:
        return [PIECES[int(i)] if int(i) < len(PIECES) else "" for i in ids]

    @property
    def vocab_size(self) -> int:
        return VOCAB


@dataclass
class FakeCtcConfig:
    blank_id: int = 0
    sos_id: int = EOS
    eos_id: int = EOS
    vocab_size: int = VOCAB


class FakeEncoder(BaseEncoder):
    subsampling_rate = SUBSAMPLING

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Linear(N_MELS * SUBSAMPLING, hidden)

    def forward(self, feats: torch.Tensor, lens: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, f = feats.shape
        t_out = -(-t // SUBSAMPLING)
        feats = nn.functional.pad(feats, (0, 0, 0, t_out * SUBSAMPLING - t))
        x = torch.tanh(self.proj(feats.reshape(b, t_out, SUBSAMPLING * f)))
        return x, torch.div(lens + SUBSAMPLING - 1, SUBSAMPLING, rounding_mode="floor")


@dataclass
class Calls:
    attention: list[dict[str, Any]] = field(default_factory=list)


class FakeCtcModel(BaseAsrModel):
    decode_families = ("ctc", "ctc_aed_rescoring")
    encoder: FakeEncoder
    config: FakeCtcConfig

    def __init__(self, seed: int = 0, hidden: int = 16, sharpness: float = 4.0,
                 blank_bias: float = 1.5) -> None:
        super().__init__()
        self.config = FakeCtcConfig()
        self.encoder = FakeEncoder(hidden)
        self.head = nn.Linear(hidden, VOCAB)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            self.head.weight.mul_(sharpness)
            self.head.bias[0] += blank_bias
            self.head.bias[EOS] = -1e4  # sos/eos is never emitted by CTC
        self.l2r = torch.randn(VOCAB, VOCAB, generator=gen).log_softmax(-1)
        self.r2l = torch.randn(VOCAB, VOCAB, generator=gen).log_softmax(-1)
        self.calls = Calls()

    def encode_offline(self, features: torch.Tensor, lengths: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder(features, lengths)

    def ctc_log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).float().log_softmax(-1)

    def forward_offline(self, features: torch.Tensor, lengths: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, lens = self.encode_offline(features, lengths)
        return self.ctc_log_probs(hidden), lens

    def bigram_score(self, table: torch.Tensor, seq: Sequence[int]) -> float:
        total, prev = 0.0, EOS  # sos and eos share an id
        for tok in [*seq, EOS]:
            total += float(table[prev, tok])
            prev = tok
        return total

    def attention_scores(self, hidden: torch.Tensor, hidden_lens: torch.Tensor | None,
                         hyps: list[list[list[int]]], reverse_weight: float
                         ) -> list[list[float]]:
        self.calls.attention.append({"rows": hidden.shape[0], "hyps": hyps,
                                     "reverse_weight": reverse_weight})
        out = []
        for row in hyps:
            scores = []
            for seq in row:
                s = self.bigram_score(self.l2r, seq)
                if reverse_weight > 0:
                    r = self.bigram_score(self.r2l, list(reversed(seq)))
                    s = (1 - reverse_weight) * s + reverse_weight * r
                scores.append(s)
            out.append(scores)
        return out


class NoClockEncoder(FakeEncoder):
    subsampling_rate = None


def build_fake_ctc(seed: int = 0, with_clock: bool = True, **kwargs: Any) -> LoadedModel:
    model = FakeCtcModel(seed, **kwargs)
    if not with_clock:
        enc = NoClockEncoder(model.encoder.proj.out_features)
        enc.load_state_dict(model.encoder.state_dict())
        model.encoder = enc
    fc = FeatureConfig("whisper_logmel", num_mel_bins=N_MELS,
                       params={"chunk_seconds": WINDOW_SECONDS})
    return LoadedModel(model=model, tokenizer=CharTokenizer(), feature_config=fc,
                       name=f"fake-ctc-{seed}", architecture="fake-ctc")


def speechy_audio(seed: int, seconds: tuple[float, float] = (0.3, 1.0)) -> np.ndarray:
    """0.3-1 s of tones that change every 50-150 ms in noise, (N,) float32 at 16 kHz."""
    rng = np.random.default_rng(seed)
    n = int(rng.uniform(*seconds) * 16000)
    out = np.zeros(n, dtype=np.float64)
    i = 0
    while i < n:
        seg = int(rng.uniform(0.05, 0.15) * 16000)
        t = np.arange(min(seg, n - i)) / 16000
        out[i:i + len(t)] = rng.uniform(0.0, 0.5) * np.sin(2 * np.pi * rng.uniform(100, 6000) * t)
        i += seg
    out += 0.01 * rng.standard_normal(n)
    return out.astype(np.float32)
