"""Qwen2-Audio built from ``oasr.layers``: audio tower -> projector -> Qwen2 causal LM.

Module names follow transformers' ``Qwen2AudioForConditionalGeneration`` with ``audio_tower``
as ``encoder``, ``language_model`` (+ ``lm_head``) as ``decoder`` and the projector kept as
``multi_modal_projector.linear``; the converter does only that renaming.

* The tower is Whisper's encoder (its layers are ``WhisperEncoderLayer``), masked over each
  row's valid frames as transformers masks it, then ``AvgPool1d(2)`` and a LayerNorm.
* ``encode_offline`` returns the *projected* audio embeddings (B, T_a, hidden) and their
  lengths: what the ``llm`` family splices into the prompt.
* The LM exposes the incremental surface the ``llm`` family drives: ``embed`` (prompt ids),
  ``prefill_embeds`` (a left-padded embedded prompt; ``starts`` the padding per row),
  ``step`` and ``select``, over the row-indexed KV of ``oasr.cache`` (dense or paged), so a
  step over paged storage can be replayed from a CUDA graph.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from oasr.cache.decoder_state import DenseKv
from oasr.cache.kv_budget import DecoderCacheSpec
from oasr.cache.paged import BlockPool, PagedKv
from oasr.layers.activation import Gelu
from oasr.layers.attention import Attention
from oasr.layers.conv import Conv1d
from oasr.layers.embedding import Embedding
from oasr.layers.ffn import GatedMLP
from oasr.layers.linear import Linear, TiedLinear
from oasr.layers.norm import LayerNorm, RMSNorm
from oasr.layers.pooling import AvgPool1d
from oasr.layers.rotary import NeoxRotaryEmbedding, apply_rotary_pos_emb
from oasr.models.base import BaseAsrModel, BaseDecoder, BaseEncoder, SmoothingGroup
from oasr.models.qwen2_audio.config import Qwen2AudioConfig
from oasr.models.whisper.model import LN_EPS, WhisperEncoderLayer


def conv_lengths(mel_frames: torch.Tensor) -> torch.Tensor:
    """Valid frames after the stride-2 convolution."""
    return (mel_frames - 1) // 2 + 1


def audio_lengths(mel_frames: torch.Tensor) -> torch.Tensor:
    """Audio embeddings per row after the pooling (transformers' output lengths)."""
    return (conv_lengths(mel_frames) - 2) // 2 + 1


class Qwen2AudioTower(BaseEncoder):
    """Log-mel (B, 2 * P, n_mels) + valid mel frames (B,) -> (B, P / 2, d_model), lengths."""

    streaming_kind = "none"
    subsampling_rate = 4

    def __init__(self, cfg: Qwen2AudioConfig) -> None:
        super().__init__()
        d = cfg.audio_d_model
        self.conv1 = Conv1d(cfg.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.act = Gelu()
        self.embed_positions = Embedding(cfg.max_source_positions, d)
        self.layers = nn.ModuleList(
            WhisperEncoderLayer(d, cfg.audio_heads, cfg.audio_ffn_dim)
            for _ in range(cfg.audio_layers)
        )
        self.avg_pooler = AvgPool1d(2, stride=2)
        self.layer_norm = LayerNorm(d, eps=LN_EPS)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        window = 2 * self.embed_positions.weight.shape[0]
        if features.shape[1] != window:
            raise ValueError(f"Qwen2-Audio's tower reads exactly {window} feature frames (a "
                             f"30 s window), got {features.shape[1]}; pad the features")
        b = features.shape[0]
        if lengths is None:
            lengths = torch.full((b,), window, dtype=torch.long, device=features.device)
        x = self.act(self.conv1(features))
        x = self.act(self.conv2(x))
        x = x + self.embed_positions.weight.to(x.dtype)
        lens = conv_lengths(lengths.to(torch.long))
        for layer in self.layers:
            x = layer(x, lens)
        return self.layer_norm(self.avg_pooler(x)), audio_lengths(lengths.to(torch.long))


class Qwen2AudioProjector(nn.Module):
    def __init__(self, cfg: Qwen2AudioConfig) -> None:
        super().__init__()
        self.linear = Linear(cfg.audio_d_model, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class Qwen2Attention(nn.Module):
    """GQA self-attention with biased q/k/v (Qwen2), rotary applied before the cache write."""

    def __init__(self, cfg: Qwen2AudioConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = (cfg.num_attention_heads,
                                                    cfg.num_key_value_heads, d)
        self.q_proj = Linear(h, self.heads * d)
        self.k_proj = Linear(h, self.kv_heads * d)
        self.v_proj = Linear(h, self.kv_heads * d)
        self.o_proj = Linear(self.heads * d, h, bias=False)
        self.attn = Attention(self.heads, d, causal=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int,
                kv: Any) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        kv.write(layer, k, v)
        o = kv.attend(layer, self.attn, q)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))


class Qwen2DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen2AudioConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.self_attn = Qwen2Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, "swish")

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int,
                kv: Any) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, layer, kv)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2LM(BaseDecoder):
    """The Qwen2 causal LM on the incremental surface (state: a ``DenseKv`` / ``PagedKv``)."""

    supports_step_graphs = True

    def __init__(self, cfg: Qwen2AudioConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Qwen2DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.rotary_emb = NeoxRotaryEmbedding(cfg.head_dim, cfg.max_position_embeddings,
                                              cfg.rope_theta)
        self.lm_head = (TiedLinear(self.embed_tokens) if cfg.tie_word_embeddings
                        else Linear(cfg.hidden_size, cfg.vocab_size, bias=False))

    @property
    def max_positions(self) -> int:
        return self.cfg.max_position_embeddings

    @property
    def cache_spec(self) -> DecoderCacheSpec:
        return DecoderCacheSpec(len(self.layers), self.cfg.num_key_value_heads,
                                self.cfg.head_dim)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(ids)

    def _run(self, x: torch.Tensor, kv: Any) -> torch.Tensor:
        """x (B, S, C) at each row's next positions -> final-normed hidden; advances lens."""
        s = x.shape[1]
        # Left-padding rows see negative positions on their pads, which nothing attends.
        pos = (kv.positions()[:, None] + torch.arange(s, device=x.device)).clamp(min=0)
        cos, sin = self.rotary_emb(pos, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, i, kv)
        kv.advance(s)
        return self.norm(x)

    def _allocate(self, b: int, capacity: int, starts: torch.Tensor, device: torch.device,
                  dtype: torch.dtype, pool: BlockPool | None) -> Any:
        if capacity > self.max_positions:
            raise ValueError(f"LM capacity {capacity} exceeds the model's {self.max_positions} "
                             "positions")
        if pool is None:
            kv = DenseKv.allocate(len(self.layers), b, self.cfg.num_key_value_heads, capacity,
                                  self.cfg.head_dim, device, dtype)
        else:
            kv = PagedKv.allocate(pool, b, capacity)
        kv.starts = starts.to(device=device, dtype=torch.long)
        return kv

    def prefill_embeds(self, embeds: torch.Tensor, starts: torch.Tensor, capacity: int,
                       pool: BlockPool | None = None) -> tuple[torch.Tensor, Any]:
        """Encode a left-padded embedded prompt.

        Args:
            embeds: (B, P, C) prompt embeddings, row ``i``'s first ``starts[i]`` being padding.
            starts: (B,) left padding per row.
            capacity: positions each row reserves (P + new tokens).
            pool: page the KV on this pool (``None``: dense). Raises
                ``oasr.cache.paged.PoolExhausted``, reserving nothing, when it cannot hold
                the rows.

        Returns:
            next-token logits (B, V) and the group's KV state.
        """
        kv = self._allocate(embeds.shape[0], capacity, starts, embeds.device, embeds.dtype,
                            pool)
        try:
            x = self._run(embeds, kv)
        except BaseException:
            kv.release_rows(list(range(kv.batch)))
            raise
        return self.lm_head(x[:, -1]), kv

    def step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        """tokens (B,) -> next-token logits (B, V); appends one key per row."""
        return self.lm_head(self._run(self.embed_tokens(tokens[:, None]), state)[:, 0])

    def select(self, state: Any, idx: torch.Tensor) -> Any:
        return state.select(idx)

    def forced_logits(self, embeds: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """Logits (B, P, V) at every position of a left-padded embedded sequence."""
        kv = self._allocate(embeds.shape[0], embeds.shape[1], starts, embeds.device,
                            embeds.dtype, None)
        return self.lm_head(self._run(embeds, kv))


class Qwen2AudioModel(BaseAsrModel):
    """Qwen2-Audio for the ``llm`` family: ``encode_offline`` (projected audio) + ``decoder``."""

    decode_families = ("llm",)
    encoder: Qwen2AudioTower
    decoder: Qwen2LM
    config: Qwen2AudioConfig

    def __init__(self, cfg: Qwen2AudioConfig) -> None:
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.encoder = Qwen2AudioTower(cfg)
        self.multi_modal_projector = Qwen2AudioProjector(cfg)
        self.decoder = Qwen2LM(cfg)

    def encode_offline(self, features: torch.Tensor, lengths: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """features (B, 3000, n_mels), valid mel frames (B,) -> audio embeddings
        (B, 750, hidden) in the LM's space, and the valid ones per row (B,)."""
        hidden, lens = self.encoder(features, lengths)
        return self.multi_modal_projector(hidden), lens

    def load_weights(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        if self.config.tie_word_embeddings:
            state_dict = {k: v for k, v in state_dict.items() if k != "decoder.lm_head.weight"}
        super().load_weights(state_dict, strict)

    def quantization_layout(self) -> tuple[SmoothingGroup, ...]:
        """Per layer, the projections reading one normed input."""
        groups: list[SmoothingGroup] = []
        for i in range(len(self.encoder.layers)):
            pre = f"encoder.layers.{i}"
            groups.append(SmoothingGroup(f"{pre}.qkv", tuple(
                f"{pre}.self_attn.{p}_proj" for p in "qkv")))
            groups.append(SmoothingGroup(f"{pre}.fc1", (f"{pre}.fc1",)))
        for i in range(len(self.decoder.layers)):
            pre = f"decoder.layers.{i}"
            groups.append(SmoothingGroup(f"{pre}.qkv", tuple(
                f"{pre}.self_attn.{p}_proj" for p in "qkv")))
            groups.append(SmoothingGroup(f"{pre}.mlp", (f"{pre}.mlp.gate_proj",
                                                        f"{pre}.mlp.up_proj")))
        return tuple(groups)


def parameter_shapes(cfg: Qwen2AudioConfig) -> dict[str, tuple[int, ...]]:
    """Every key of the model's state dict and its shape (built on the meta device)."""
    with torch.device("meta"):
        model = Qwen2AudioModel(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        shapes.pop("decoder.lm_head.weight", None)
    return shapes
