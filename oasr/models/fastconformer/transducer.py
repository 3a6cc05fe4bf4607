"""FastConformer transducers: the LSTM prediction network, the additive joint, and the RNN-T
and TDT models.

Predictor: ``embedding`` (vocab incl. blank) -> ``lstm`` (``pred_layers`` x ``pred_hidden``);
its state is ``LstmState`` (h, c and the last output), started by one step on the blank (the
history before any label, as NeMo's blank-as-pad start). Joint:
``out(relu(enc_proj(enc) + pred_proj(pred)))``; for TDT ``out`` is ``vocab + len(durations)``
wide, the first ``vocab`` columns token logits and the rest duration logits.

The predictor is recurrent, so a search over it keeps per-row (h, c); beam search over it is
refused by the ``transducer`` family (its beam merges label windows, which an LSTM has not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from oasr.layers.activation import Relu
from oasr.layers.embedding import Embedding
from oasr.layers.linear import Linear
from oasr.layers.rnn import LSTM
from oasr.models.base import Joiner, TransducerPredictor
from oasr.models.fastconformer.config import FastConformerConfig
from oasr.models.fastconformer.model import FastConformerModel

__all__ = ["FastConformerRnnt", "FastConformerTdt", "LstmPredictor", "LstmState",
           "ReluJoiner"]


@dataclass
class LstmState:
    """h, c: (L, B, H); out: (B, H), the LSTM output for the history so far."""

    h: torch.Tensor
    c: torch.Tensor
    out: torch.Tensor


class LstmPredictor(TransducerPredictor):
    """The recurrent prediction network (``stateless_tensors`` is ``None``: keep the loop)."""

    recurrent = True

    def __init__(self, vocab_size: int, hidden: int, layers: int, blank_id: int) -> None:
        super().__init__()
        self.vocab_size, self.hidden, self.layers = vocab_size, hidden, layers
        self.blank_id = blank_id
        self.embedding = Embedding(vocab_size, hidden)
        self.lstm = LSTM(hidden, hidden, num_layers=layers, batch_first=True)

    def _step(self, tokens: torch.Tensor, h: torch.Tensor, c: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y, (h2, c2) = self.lstm(self.embedding(tokens)[:, None, :], (h, c))
        return y[:, 0], h2, c2

    def init_state(self, batch: int, device: torch.device) -> LstmState:
        dtype = self.embedding.weight.dtype
        zeros = torch.zeros(self.layers, batch, self.hidden, device=device, dtype=dtype)
        blank = torch.full((batch,), self.blank_id, dtype=torch.int64, device=device)
        out, h, c = self._step(blank, zeros, zeros.clone())
        return LstmState(h, c, out)

    def predict(self, state: LstmState) -> torch.Tensor:
        return state.out

    def advance(self, state: LstmState, tokens: torch.Tensor, emitted: torch.Tensor
                ) -> LstmState:
        out, h, c = self._step(tokens.to(torch.int64), state.h, state.c)
        keep = emitted.to(out.device)
        return LstmState(torch.where(keep[None, :, None], h, state.h),
                         torch.where(keep[None, :, None], c, state.c),
                         torch.where(keep[:, None], out, state.out))

    def stack_states(self, states: list[LstmState]) -> LstmState:
        return LstmState(torch.cat([s.h for s in states], dim=1),
                         torch.cat([s.c for s in states], dim=1),
                         torch.cat([s.out for s in states], dim=0))

    def unstack_states(self, state: LstmState) -> list[LstmState]:
        return [LstmState(state.h[:, i:i + 1], state.c[:, i:i + 1], state.out[i:i + 1])
                for i in range(state.out.shape[0])]

    def select(self, state: LstmState, idx: torch.Tensor) -> LstmState:
        """The rows ``idx`` of a batched state."""
        return LstmState(state.h[:, idx], state.c[:, idx], state.out[idx])


class ReluJoiner(Joiner):
    """``out(relu(enc_proj(enc) + pred_proj(pred)))``; ``forward`` takes the projections."""

    def __init__(self, encoder_dim: int, pred_dim: int, out_dim: int) -> None:
        super().__init__()
        self.enc_proj = Linear(encoder_dim, pred_dim)
        self.pred_proj = Linear(pred_dim, pred_dim)
        self.out = Linear(pred_dim, out_dim)
        self.relu = Relu()

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return self.enc_proj(enc)

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        return self.pred_proj(dec)

    def forward(self, enc: torch.Tensor, dec: torch.Tensor) -> torch.Tensor:
        return self.out(self.relu(enc + dec))

    def additive_tensors(self) -> dict[str, Any] | None:
        return {"encoder_proj": self.enc_proj.weight, "encoder_proj_bias": self.enc_proj.bias,
                "decoder_proj": self.pred_proj.weight, "decoder_proj_bias": self.pred_proj.bias,
                "output_weight": self.out.weight, "output_bias": self.out.bias,
                "activation": "relu"}


class _Transducer(FastConformerModel):
    predictor: LstmPredictor
    joint: ReluJoiner
    head = ""

    def __init__(self, cfg: FastConformerConfig) -> None:
        if cfg.head != self.head:
            raise ValueError(f"{type(self).__name__} needs head={self.head!r}, got {cfg.head!r}")
        super().__init__(cfg)
        self.predictor = LstmPredictor(cfg.vocab_size, cfg.pred_hidden, cfg.pred_layers,
                                       cfg.blank_id)
        self.joint = ReluJoiner(cfg.d_model, cfg.pred_hidden, cfg.joint_width)

    @property
    def joiner(self) -> ReluJoiner:
        return self.joint


class FastConformerRnnt(_Transducer):
    """Parakeet RNN-T, served by the ``transducer`` family: greedy, a blank advancing one
    frame and at most ``max_symbols_per_step`` labels per frame (the bundle's
    ``max_sym_per_frame`` default); beam search is refused (recurrent predictor)."""

    decode_families = ("transducer",)
    head = "rnnt"


class FastConformerTdt(_Transducer):
    """Parakeet TDT: the joint also scores ``config.durations``."""

    decode_families = ("tdt",)
    head = "tdt"
