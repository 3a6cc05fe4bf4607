"""Whisper (encoder + autoregressive decoder) built from ``oasr.layers``.

Module and parameter names follow transformers' ``WhisperModel`` (without the ``model.``
prefix), so a Hugging Face state dict loads as is; ``fc1`` / ``fc2`` stay flat modules for the
same reason, ``fc1`` being a ``LinearActivation("gelu")`` (exact erf). The output projection is
tied to ``decoder.embed_tokens``.

The decoder exposes the batched incremental surface the ``aed`` family drives:
``prefill`` (prompt + cross K/V per row), ``step`` (one token per row over the row-indexed
KV), ``select`` (index rows: retirement, beam expansion and reorder).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from oasr.cache.decoder_state import AedState, CrossKv, DenseKv
from oasr.layers.activation import Gelu
from oasr.layers.attention import Attention
from oasr.layers.conv import Conv1d
from oasr.layers.embedding import Embedding
from oasr.layers.linear import Linear, LinearActivation
from oasr.layers.norm import LayerNorm
from oasr.models.whisper.config import WhisperConfig

LN_EPS = 1e-5


class WhisperAttention(nn.Module):
    """Projections under HF's names (``k_proj`` has no bias) + the waist's ``Attention``."""

    def __init__(self, d_model: int, heads: int, causal: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model, bias=False)
        self.v_proj = Linear(d_model, d_model)
        self.out_proj = Linear(d_model, d_model)
        self.attn = Attention(heads, self.head_dim, causal=causal)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, H, T, D)."""
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.k_proj(x)), self.split(self.v_proj(x))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               kv_lens: torch.Tensor | None = None,
               kv_starts: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, Tq, C) queries; k, v: (B, H, Tk, D) -> (B, Tq, C)."""
        q = self.split(self.q_proj(x))
        o = self.attn(q, k, v, kv_lens=kv_lens, kv_starts=kv_starts)
        b, _, t, _ = o.shape
        return self.out_proj(o.transpose(1, 2).reshape(b, t, -1))


class WhisperEncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn_dim: int) -> None:
        super().__init__()
        self.self_attn = WhisperAttention(d_model, heads)
        self.self_attn_layer_norm = LayerNorm(d_model, eps=LN_EPS)
        self.fc1 = LinearActivation(d_model, ffn_dim, "gelu")
        self.fc2 = Linear(ffn_dim, d_model)
        self.final_layer_norm = LayerNorm(d_model, eps=LN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.self_attn_layer_norm(x)
        k, v = self.self_attn.project_kv(h)
        x = x + self.self_attn.attend(h, k, v)
        return x + self.fc2(self.fc1(self.final_layer_norm(x)))


class WhisperEncoder(nn.Module):
    """Log-mel (B, 2 * P, n_mels) -> hidden (B, P, d_model), P = max_source_positions."""

    streaming_kind = "none"
    subsampling_rate = 2

    def __init__(self, cfg: WhisperConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.conv1 = Conv1d(cfg.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.act = Gelu()
        self.embed_positions = Embedding(cfg.max_source_positions, d)
        self.layers = nn.ModuleList(
            WhisperEncoderLayer(d, cfg.encoder_attention_heads, cfg.encoder_ffn_dim)
            for _ in range(cfg.encoder_layers)
        )
        self.layer_norm = LayerNorm(d, eps=LN_EPS)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.act(self.conv1(features))
        x = self.act(self.conv2(x))
        t = x.shape[1]
        if t > self.embed_positions.weight.shape[0]:
            raise ValueError(
                f"{2 * t} feature frames exceed Whisper's window of "
                f"{2 * self.embed_positions.weight.shape[0]}; cut the audio into windows"
            )
        x = x + self.embed_positions.weight[:t].to(x.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class WhisperDecoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn_dim: int) -> None:
        super().__init__()
        self.self_attn = WhisperAttention(d_model, heads, causal=True)
        self.self_attn_layer_norm = LayerNorm(d_model, eps=LN_EPS)
        self.encoder_attn = WhisperAttention(d_model, heads)
        self.encoder_attn_layer_norm = LayerNorm(d_model, eps=LN_EPS)
        self.fc1 = LinearActivation(d_model, ffn_dim, "gelu")
        self.fc2 = Linear(ffn_dim, d_model)
        self.final_layer_norm = LayerNorm(d_model, eps=LN_EPS)

    def forward(self, x: torch.Tensor, layer: int, state: AedState) -> torch.Tensor:
        h = self.self_attn_layer_norm(x)
        k_new, v_new = self.self_attn.project_kv(h)
        state.kv.write(layer, k_new, v_new)
        k, v = state.kv.k[layer], state.kv.v[layer]
        width = state.kv.max_len + x.shape[1]
        x = x + self.self_attn.attend(
            h, k[:, :, :width], v[:, :, :width],
            kv_lens=state.kv.lens + x.shape[1], kv_starts=state.kv.starts,
        )
        h = self.encoder_attn_layer_norm(x)
        x = x + self.encoder_attn.attend(h, state.cross.k[layer], state.cross.v[layer],
                                         kv_lens=state.cross.lens)
        return x + self.fc2(self.fc1(self.final_layer_norm(x)))


class WhisperDecoder(nn.Module):
    """The batched incremental surface: ``prefill`` / ``step`` / ``select``."""

    # Dense storage only: the paged pool that step graphs need is not implemented here.
    supports_step_graphs = False

    def __init__(self, cfg: WhisperConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, d)
        self.embed_positions = Embedding(cfg.max_target_positions, d)
        self.layers = nn.ModuleList(
            WhisperDecoderLayer(d, cfg.decoder_attention_heads, cfg.decoder_ffn_dim)
            for _ in range(cfg.decoder_layers)
        )
        self.layer_norm = LayerNorm(d, eps=LN_EPS)

    @property
    def max_positions(self) -> int:
        return self.cfg.max_target_positions

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(self.layer_norm(x), self.embed_tokens.weight.t())

    def _run(self, tokens: torch.Tensor, state: AedState) -> torch.Tensor:
        """tokens (B, S) at each row's next positions -> hidden (B, S, C); advances lens."""
        s = tokens.shape[1]
        pos = state.kv.positions()[:, None] + torch.arange(s, device=tokens.device)
        x = self.embed_tokens(tokens) + self.embed_positions(pos)
        for i, layer in enumerate(self.layers):
            x = layer(x, i, state)
        state.kv.advance(s)
        return x

    def cross_kv(self, enc: torch.Tensor, enc_lens: torch.Tensor | None) -> CrossKv:
        ks, vs = [], []
        for layer in self.layers:
            k, v = layer.encoder_attn.project_kv(enc)
            ks.append(k)
            vs.append(v)
        return CrossKv(ks, vs, enc_lens)

    def prefill(self, enc: torch.Tensor, prompt: torch.Tensor, capacity: int,
                enc_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, AedState]:
        """Encode the prompt and cache the cross K/V.

        Args:
            enc: encoder output (B, T_enc, C).
            prompt: (B, P) token ids, the same length for every row.
            capacity: KV positions to reserve per row (prompt + new tokens).
            enc_lens: (B,) valid encoder frames, ``None`` for the whole window.

        Returns:
            logits (B, V) for the next token, and the group's state.
        """
        if capacity > self.max_positions:
            raise ValueError(
                f"decoder capacity {capacity} exceeds Whisper's {self.max_positions} positions"
            )
        b = enc.shape[0]
        first = self.layers[0].self_attn
        kv = DenseKv.allocate(len(self.layers), b, first.heads, capacity, first.head_dim,
                              enc.device, enc.dtype)
        state = AedState(kv, self.cross_kv(enc, enc_lens))
        x = self._run(prompt, state)
        return self._logits(x[:, -1]), state

    def step(self, tokens: torch.Tensor, state: AedState) -> torch.Tensor:
        """tokens (B,) -> next-token logits (B, V); appends one key per row."""
        return self._logits(self._run(tokens[:, None], state)[:, 0])

    def select(self, state: AedState, idx: torch.Tensor) -> AedState:
        return state.select(idx)

    def forced_logits(self, enc: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, S, V) for full sequences ``tokens`` (B, S)."""
        first = self.layers[0].self_attn
        kv = DenseKv.allocate(len(self.layers), enc.shape[0], first.heads, tokens.shape[1],
                              first.head_dim, enc.device, enc.dtype)
        state = AedState(kv, self.cross_kv(enc, None))
        return self._logits(self._run(tokens, state))


class WhisperModel(nn.Module):
    """Whisper for the ``aed`` family: ``encode_offline`` + ``decoder``."""

    def __init__(self, cfg: WhisperConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = WhisperEncoder(cfg)
        self.decoder = WhisperDecoder(cfg)

    @classmethod
    def from_config(cls, cfg: WhisperConfig) -> WhisperModel:
        return cls(cfg)

    @property
    def default_decode_type(self) -> str:
        return "aed"

    def encode_offline(self, features: torch.Tensor,
                       lengths: torch.Tensor | None = None) -> torch.Tensor:
        """features (B, 2 * P, n_mels) -> (B, P, d_model).

        Whisper attends over its whole fixed window (it was trained on padded 30 s inputs),
        so ``lengths`` does not mask the encoder.
        """
        return self.encoder(features)

    def load_weights(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        sd = {k: v for k, v in state_dict.items() if k != "proj_out.weight"}
        missing, unexpected = self.load_state_dict(sd, strict=False)
        if strict and (missing or unexpected):
            raise ValueError(
                f"Whisper weights do not match the model: missing {sorted(missing)}, "
                f"unexpected {sorted(unexpected)}"
            )
