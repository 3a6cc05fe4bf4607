"""Whisper (encoder + autoregressive decoder) built from ``oasr.layers``.

Module and parameter names follow transformers' ``WhisperModel`` (without the ``model.``
prefix), so a Hugging Face state dict loads as is; ``fc1`` / ``fc2`` stay flat modules for the
same reason, ``fc1`` being a ``LinearActivation("gelu")`` (exact erf). The output projection is
tied to ``decoder.embed_tokens``.

The decoder exposes the batched incremental surface the ``aed`` family drives:
``prefill`` (prompt + cross K/V per row), ``step`` (one token per row over the row-indexed
KV), ``select`` (index rows: retirement, beam expansion and reorder). Its KV is dense, or
paged on a ``BlockPool`` when ``prefill`` is handed one; the layers only call the storage's
``write`` / ``attend``, so they do not branch on the choice.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from oasr.cache.decoder_state import AedState, CrossKv, DenseKv
from oasr.cache.kv_budget import DecoderCacheSpec
from oasr.cache.paged import BlockPool, PagedCrossKv, PagedKv
from oasr.layers.activation import Gelu
from oasr.layers.attention import Attention
from oasr.layers.conv import Conv1d
from oasr.layers.embedding import Embedding
from oasr.layers.linear import Linear, LinearActivation, TiedLinear
from oasr.layers.matmul import bmm
from oasr.layers.norm import LayerNorm
from oasr.models.base import BaseAsrModel, BaseDecoder, BaseEncoder, SmoothingGroup
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
        return self._merge(o)

    def attend_cache(self, x: torch.Tensor, cache: Any, layer: int) -> torch.Tensor:
        """x: (B, Tq, C) queries over a decoder cache's keys of ``layer`` (dense or paged)."""
        return self._merge(cache.attend(layer, self.attn, self.split(self.q_proj(x))))

    def _merge(self, o: torch.Tensor) -> torch.Tensor:
        """(B, H, T, D) -> out_proj of (B, T, C)."""
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

    def forward(self, x: torch.Tensor, lens: torch.Tensor | None = None) -> torch.Tensor:
        """``lens`` (B,): valid frames, keys past them masked (Qwen2-Audio's tower); Whisper
        itself attends over its whole window."""
        h = self.self_attn_layer_norm(x)
        k, v = self.self_attn.project_kv(h)
        x = x + self.self_attn.attend(h, k, v, kv_lens=lens)
        return x + self.fc2(self.fc1(self.final_layer_norm(x)))


class WhisperEncoder(BaseEncoder):
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
        x = x + self.self_attn.attend_cache(h, state.kv, layer)
        h = self.encoder_attn_layer_norm(x)
        x = x + self.encoder_attn.attend_cache(h, state.cross, layer)
        return x + self.fc2(self.fc1(self.final_layer_norm(x)))


class WhisperDecoder(BaseDecoder):
    """The batched incremental surface: ``prefill`` / ``step`` / ``select``."""

    # A step over a paged state reads only pool addresses and the state's tables and lengths,
    # so it can be captured; the graph cache checks ``state.capturable`` (dense is not).
    supports_step_graphs = True

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
        # The vocabulary projection, tied to the embedding (HF's proj_out): the largest GEMM of
        # every step, so it goes through the waist like every other projection.
        self.proj_out = TiedLinear(self.embed_tokens)

    @property
    def max_positions(self) -> int:
        return self.cfg.max_target_positions

    @property
    def cache_spec(self) -> DecoderCacheSpec:
        """Per-row KV geometry; the cross half is the whole encoder window."""
        first = self.layers[0].self_attn
        return DecoderCacheSpec(len(self.layers), first.heads, first.head_dim,
                                self.cfg.max_source_positions)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_out(self.layer_norm(x))

    def _run(self, tokens: torch.Tensor, state: AedState) -> torch.Tensor:
        """tokens (B, S) at each row's next positions -> hidden (B, S, C); advances lens."""
        s = tokens.shape[1]
        pos = state.kv.positions()[:, None] + torch.arange(s, device=tokens.device)
        # Only a finished row, stepping until the host next reads the end flags, gets past the
        # table; paged lens are not clamped, so clamp here.
        # A left-padding slot has a negative position; its output is never read.
        pos = pos.clamp(min=0, max=self.max_positions - 1)
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

    def paged_cross_kv(self, enc: torch.Tensor, enc_lens: torch.Tensor | None,
                       pool: BlockPool) -> PagedCrossKv:
        """The cross K/V written into ``pool`` one layer at a time (a fixed run of blocks per
        row), so no whole-model dense copy is held."""
        cross = PagedCrossKv.allocate(pool, enc.shape[0], enc.shape[1], enc_lens)
        for i, layer in enumerate(self.layers):
            k, v = layer.encoder_attn.project_kv(enc)
            cross.write(i, k, v)
        return cross

    def prefill(self, enc: torch.Tensor, prompt: torch.Tensor, capacity: int,
                enc_lens: torch.Tensor | None = None, pool: BlockPool | None = None,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, AedState]:
        """Encode the prompt and cache the cross K/V.

        Args:
            enc: encoder output (B, T_enc, C).
            prompt: (B, P) token ids; row ``i``'s first ``starts[i]`` are left padding.
            capacity: KV positions to reserve per row (P + new tokens).
            enc_lens: (B,) valid encoder frames, ``None`` for the whole window.
            pool: page both halves on this pool (``None``: dense storage). Raises
                ``oasr.cache.paged.PoolExhausted``, reserving nothing, when it cannot hold
                the rows.
            starts: (B,) left padding per row (``None``: none). A row's first real token
                sits at position 0, as it would decoded alone.

        Returns:
            logits (B, V) for the next token, and the group's state.
        """
        logits, state, _ = self.prefill_scored(enc, prompt, capacity, enc_lens, pool, starts)
        return logits, state

    def prefill_scored(self, enc: torch.Tensor, prompt: torch.Tensor, capacity: int,
                       enc_lens: torch.Tensor | None = None, pool: BlockPool | None = None,
                       starts: torch.Tensor | None = None, score_at: int | None = None
                       ) -> tuple[torch.Tensor, AedState, torch.Tensor | None]:
        """``prefill``, plus the logits (B, V) after prompt column ``score_at`` (``None``:
        none): Whisper reads its no-speech probability after ``<|startoftranscript|>``."""
        if capacity > self.max_positions:
            raise ValueError(
                f"decoder capacity {capacity} exceeds Whisper's {self.max_positions} positions"
            )
        b = enc.shape[0]
        first = self.layers[0].self_attn
        if pool is None:
            kv = DenseKv.allocate(len(self.layers), b, first.heads, capacity, first.head_dim,
                                  enc.device, enc.dtype)
            state = AedState(kv, self.cross_kv(enc, enc_lens))
        else:
            paged = PagedKv.allocate(pool, b, capacity)
            try:
                cross = self.paged_cross_kv(enc, enc_lens, pool)
            except BaseException:
                paged.release_rows(list(range(b)))
                raise
            state = AedState(paged, cross)
        if starts is not None:
            state.kv.starts = starts.to(device=enc.device, dtype=torch.long)
        x = self._run(prompt, state)
        scored = None if score_at is None else self._logits(x[:, score_at])
        return self._logits(x[:, -1]), state, scored

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

    def cross_attention_scores(self, tokens: torch.Tensor, cross_k: list[torch.Tensor],
                               cross_v: list[torch.Tensor], heads: list[tuple[int, int]]
                               ) -> torch.Tensor:
        """A teacher-forced pass returning the cross-attention scores of ``heads``.

        Args:
            tokens: (R, S) full sequences, right-padded (causal attention never reads the pad).
            cross_k, cross_v: per layer (R, H, T_enc, D), the rows' cached cross K/V.
            heads: ``(layer, head)`` pairs, e.g. the checkpoint's ``alignment_heads``.

        Returns:
            pre-softmax scores (R, len(heads), S, T_enc) in fp32, ``q . k / sqrt(D)`` as the
            attention computes them. The pass stops at the last layer holding a head: nothing
            after it (nor the vocabulary projection) changes the scores.
        """
        s = tokens.shape[1]
        pos = torch.arange(s, device=tokens.device)
        x = self.embed_tokens(tokens) + self.embed_positions(pos)[None]
        wanted: dict[int, list[int]] = {}
        for layer, head in heads:
            wanted.setdefault(int(layer), []).append(int(head))
        last = max(wanted)
        scores: dict[tuple[int, int], torch.Tensor] = {}
        for i, layer in enumerate(self.layers[:last + 1]):
            h = layer.self_attn_layer_norm(x)
            k, v = layer.self_attn.project_kv(h)
            x = x + layer.self_attn.attend(h, k, v)
            h = layer.encoder_attn_layer_norm(x)
            if i in wanted:
                att = layer.encoder_attn
                q = att.split(att.q_proj(h))
                idx = torch.tensor(wanted[i], device=q.device)
                qh = q.index_select(1, idx).float()  # (R, h, S, D)
                kh = cross_k[i].index_select(1, idx).float()  # (R, h, T_enc, D)
                rows, nh, _, d = qh.shape
                qk = bmm(qh.reshape(rows * nh, s, d),
                         kh.reshape(rows * nh, -1, d).transpose(1, 2)).view(rows, nh, s, -1)
                for j, head in enumerate(wanted[i]):
                    scores[(i, head)] = qk[:, j] * att.head_dim ** -0.5
            if i == last:
                break
            x = x + layer.encoder_attn.attend(h, cross_k[i], cross_v[i])
            x = x + layer.fc2(layer.fc1(layer.final_layer_norm(x)))
        return torch.stack([scores[(int(lay), int(hd))] for lay, hd in heads], dim=1)


class WhisperModel(BaseAsrModel):
    """Whisper for the ``aed`` family: ``encode_offline`` + ``decoder``."""

    decode_families = ("aed",)
    encoder: WhisperEncoder
    decoder: WhisperDecoder
    config: WhisperConfig

    def __init__(self, cfg: WhisperConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = WhisperEncoder(cfg)
        self.decoder = WhisperDecoder(cfg)

    def encode_offline(self, features: torch.Tensor,
                       lengths: torch.Tensor | None = None) -> torch.Tensor:
        """features (B, 2 * P, n_mels) -> (B, P, d_model).

        Whisper attends over its whole fixed window (it was trained on padded 30 s inputs),
        so ``lengths`` does not mask the encoder.
        """
        return self.encoder(features)

    def load_weights(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        # HF's proj_out.weight is the embedding again (decoder.proj_out is tied to it).
        super().load_weights({k: v for k, v in state_dict.items() if k != "proj_out.weight"},
                             strict)

    def quantization_layout(self) -> tuple[SmoothingGroup, ...]:
        """Per layer, the projections reading one normed input: self-attention q/k/v and fc1;
        in the decoder also the cross-attention query (its k/v read the encoder output)."""
        groups: list[SmoothingGroup] = []
        for side, layers in (("encoder", self.encoder.layers), ("decoder", self.decoder.layers)):
            for i in range(len(layers)):
                pre = f"{side}.layers.{i}"
                groups.append(SmoothingGroup(f"{pre}.qkv", tuple(
                    f"{pre}.self_attn.{p}_proj" for p in "qkv")))
                groups.append(SmoothingGroup(f"{pre}.fc1", (f"{pre}.fc1",)))
                if side == "decoder":
                    groups.append(SmoothingGroup(f"{pre}.cross_q",
                                                 (f"{pre}.encoder_attn.q_proj",)))
        return tuple(groups)
