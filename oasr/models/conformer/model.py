"""A WeNet U2 / U2++ Conformer: encoder, CTC head and attention decoder(s) for rescoring.

The surface the decode families drive:

* ``encode_offline(features, lengths) -> (hidden, hidden_lens)``
* ``ctc_log_probs(hidden) -> log_probs`` (float32 log-softmax of the CTC head)
* ``forward_offline(features, lengths) -> (log_probs, lens)``: the CTC fast path
* ``attention_scores(hidden, hidden_lens, hyps, reverse_weight)``: WeNet's attention-rescoring
  score of every hypothesis, under the l2r decoder and, for U2++, the r2l one.

Module and parameter names are WeNet's state-dict keys (see ``ConformerConfig``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from oasr.layers.linear import Linear
from oasr.models.base import BaseAsrModel, SmoothingGroup
from oasr.models.conformer.config import ConformerConfig
from oasr.models.conformer.decoder import BiTransformerDecoder, TransformerDecoder
from oasr.models.conformer.encoder import ConformerEncoder

__all__ = ["ConformerModel", "CtcHead"]


class CtcHead(nn.Module):
    """``ctc_lo``: hidden (B, T, C) -> logits (B, T, V)."""

    def __init__(self, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.ctc_lo = Linear(d_model, vocab_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.ctc_lo(hidden)


class ConformerModel(BaseAsrModel):
    """Conformer for the ``ctc`` and ``ctc_aed_rescoring`` families."""

    decode_families = ("ctc", "ctc_aed_rescoring")
    encoder: ConformerEncoder
    # Teacher-forced rescoring decoders, not the incremental BaseDecoder surface.
    decoder: TransformerDecoder | BiTransformerDecoder  # type: ignore[assignment]
    config: ConformerConfig

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = ConformerEncoder(cfg)
        self.ctc = CtcHead(cfg.d_model, cfg.vocab_size)
        # The offline chunk mask asked for (configure_chunks); None: the checkpoint's own.
        self._chunk_frames: int | None = None
        self._left_chunks = -1
        if cfg.decoder == "bitransformer":
            self.decoder = BiTransformerDecoder(cfg)
        else:
            self.decoder = TransformerDecoder(cfg, cfg.decoder_layers)

    def configure_chunks(self, chunk_size: int | None = None,
                         left_context_frames: int | None = None) -> None:
        """``-d chunk_size`` / ``-d left_context_frames`` for a chunk-trained checkpoint,
        WeNet's ``--decoding_chunk_size`` (encoder output frames; -1: the whole utterance) and
        ``--num_decoding_left_chunks`` given in frames (a whole number of chunks; -1: all).
        As WeNet's chunk mask: a dynamic-chunk model takes the chunk asked for (unset: the
        whole utterance), a static-chunk model keeps its own chunk (it takes the left context
        only), a model trained on neither has no chunked mode and refuses both by name."""
        cfg = self.config
        self._chunk_frames, self._left_chunks = None, -1
        if chunk_size is None and left_context_frames is None:
            return
        if not cfg.use_dynamic_chunk and cfg.static_chunk_size <= 0:
            chosen = [n for n, v in (("chunk_size", chunk_size),
                                     ("left_context_frames", left_context_frames))
                      if v is not None]
            raise ValueError(f"{', '.join(chosen)}: this Conformer was trained without chunks "
                             "(no use_dynamic_chunk or static_chunk_size in its train.yaml) "
                             "and has no chunked mode; drop the option")
        if cfg.use_dynamic_chunk:
            chunk = -1 if chunk_size is None else int(chunk_size)
            if chunk == 0 or chunk < -1:
                raise ValueError(f"chunk_size={chunk_size}: a positive number of encoder "
                                 "frames, or -1 for the whole utterance")
        else:
            chunk = cfg.static_chunk_size
            if chunk_size is not None and int(chunk_size) != chunk:
                raise ValueError(f"chunk_size={chunk_size}: this Conformer was trained with a "
                                 f"static chunk of {chunk} frames and decodes in it (as WeNet "
                                 "does); drop the option or set it to that")
        if chunk == -1:  # the whole utterance: no chunks, so no left window either
            if left_context_frames is not None:
                raise ValueError(f"left_context_frames={left_context_frames} needs chunk_size "
                                 "(this model attends to the whole utterance without it)")
            return
        left = -1 if left_context_frames is None else int(left_context_frames)
        if left != -1 and (left < 0 or left % chunk):
            raise ValueError(f"left_context_frames={left_context_frames}: a whole number of "
                             f"{chunk}-frame chunks (WeNet's num_decoding_left_chunks x "
                             "chunk), or -1 for all")
        self._chunk_frames = chunk
        self._left_chunks = -1 if left == -1 else left // chunk

    def encoder_options(self) -> dict[str, Any]:
        """``offline_chunk``: the chunk mask a static-chunk model keeps offline (0: none)."""
        return {"offline_chunk": self.encoder.offline_chunk}

    def quantization_layout(self) -> tuple[SmoothingGroup, ...]:
        """Per encoder layer, the attention's q/k/v (one normed input)."""
        return tuple(
            SmoothingGroup(f"encoder.encoders.{i}.self_attn.qkv", tuple(
                f"encoder.encoders.{i}.self_attn.linear_{p}" for p in "qkv"))
            for i in range(len(self.encoder.encoders))
        )

    # -- CTC ----------------------------------------------------------------------------------
    def encode_offline(self, features: torch.Tensor,
                       lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features: (B, T, F) float; lengths: (B,) int64 valid frames.

        Returns:
            hidden (B, T', C) and hidden_lens (B,) int64, ``T' ~ T / subsampling_rate``.
            Frames at or past a row's length hold no meaning.
        """
        if self._chunk_frames is None:
            return self.encoder(features, lengths)
        return self.encoder(features, lengths, self._chunk_frames, self._left_chunks)

    def ctc_log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (B, T', C) -> CTC log-probabilities (B, T', V), float32 for any model dtype."""
        return F.log_softmax(self.ctc(hidden).float(), dim=-1)

    def forward_offline(self, features: torch.Tensor,
                        lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder + CTC head: (B, T, F), (B,) -> log-probs (B, T', V) float32, lens (B,)."""
        hidden, lens = self.encode_offline(features, lengths)
        return self.ctc_log_probs(hidden), lens

    # -- attention rescoring ----------------------------------------------------------------
    def attention_scores(
        self,
        hidden: torch.Tensor,
        hidden_lens: torch.Tensor,
        hyps: list[list[list[int]]],
        reverse_weight: float = 0.0,
    ) -> list[list[float]]:
        """Attention-decoder log-likelihoods of hypotheses, as WeNet's attention rescoring.

        Args:
            hidden: (B, T', C) from ``encode_offline``; hidden_lens: (B,) its lengths.
            hyps: per row, its hypotheses as token ids without sos / eos (may be empty).
            reverse_weight: 0 for the l2r score alone; otherwise
                ``(1 - w) * l2r + w * r2l``, r2l scoring the reversed hypothesis.

        Returns:
            per row, one score per hypothesis: the sum of the log-probabilities of its tokens
            and of eos, teacher-forced after sos.

        Raises:
            ValueError: a row count that does not match ``hidden``, a token outside the
                vocabulary, a reverse_weight outside [0, 1], or reverse_weight > 0 on a model
                without a right-to-left decoder.
        """
        cfg = self.config
        if len(hyps) != hidden.shape[0]:
            raise ValueError(f"{len(hyps)} rows of hypotheses for {hidden.shape[0]} encoder rows")
        if not 0.0 <= reverse_weight <= 1.0:
            raise ValueError(f"reverse_weight must be in [0, 1], got {reverse_weight}")
        if reverse_weight > 0.0 and not isinstance(self.decoder, BiTransformerDecoder):
            raise ValueError("this checkpoint has no right-to-left decoder; use reverse_weight=0")
        flat = [(b, list(h)) for b, row in enumerate(hyps) for h in row]
        if not flat:
            return [[] for _ in hyps]
        bad = [t for _, h in flat for t in h if not 0 <= t < cfg.vocab_size]
        if bad:
            raise ValueError(f"hypothesis tokens outside the vocabulary ({cfg.vocab_size}): "
                             f"{bad[:5]}")
        device = hidden.device
        rows = torch.tensor([b for b, _ in flat], dtype=torch.int64, device=device)
        seqs = [h for _, h in flat]
        hidden_lens = hidden_lens.to(device)
        if isinstance(self.decoder, BiTransformerDecoder):
            score = self._score(self.decoder.left_decoder, hidden, hidden_lens, rows, seqs)
            if reverse_weight > 0.0:
                r2l = self._score(self.decoder.right_decoder, hidden, hidden_lens, rows,
                                  [h[::-1] for h in seqs])
                score = score * (1.0 - reverse_weight) + r2l * reverse_weight
        else:
            score = self._score(self.decoder, hidden, hidden_lens, rows, seqs)
        values = score.tolist()
        out: list[list[float]] = [[] for _ in hyps]
        for (b, _), value in zip(flat, values):
            out[b].append(value)
        return out

    def _score(self, decoder: TransformerDecoder, hidden: torch.Tensor, hidden_lens: torch.Tensor,
               rows: torch.Tensor, seqs: list[list[int]]) -> torch.Tensor:
        """Teacher-forced log-likelihood of ``seqs`` + eos after sos: (N,) float32."""
        cfg = self.config
        n, length = len(seqs), max(len(s) for s in seqs) + 1
        device = hidden.device
        # Inputs [sos, y1 .. yn] and targets [y1 .. yn, eos]; padding repeats eos.
        inputs = torch.full((n, length), cfg.eos_id, dtype=torch.int64)
        targets = torch.full((n, length), cfg.eos_id, dtype=torch.int64)
        valid = torch.zeros(n, length, dtype=torch.bool)
        for i, s in enumerate(seqs):
            inputs[i, 0] = cfg.sos_id
            if s:
                inputs[i, 1:len(s) + 1] = torch.tensor(s)
                targets[i, :len(s)] = torch.tensor(s)
            valid[i, :len(s) + 1] = True
        inputs, targets, valid = inputs.to(device), targets.to(device), valid.to(device)
        logits = decoder(inputs, hidden, hidden_lens, rows)
        logp = F.log_softmax(logits.float(), dim=-1)
        picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return picked.masked_fill(~valid, 0.0).sum(-1)
