"""The ``paraformer`` family: one-shot non-autoregressive decoding through the CIF.

``model.predict`` (the CIF predictor) integrates the encoder frames into one acoustic embedding
per token; ``model.nar_decode`` runs the decoder once over them; the argmax of each position
is the token (blank / sos / eos dropped, as FunASR's ``inference``). No search, no steps.

Word timings come free from the CIF's fire boundaries (``cif_spans``, this family's
``span_fields``): token ``k`` spans the integration window that fired it, from the frame where
token ``k - 1`` fired (frame 0 for the first) to one past its own fire frame, in encoder frames
(``frame_shift_ms x lfr_n`` each).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from oasr.engine.decode.alignment import fill_word_timings
from oasr.engine.decode.ctc import mean_posterior
from oasr.engine.decode.frame_sync import FrameSyncStrategy
from oasr.engine.request import Request, RequestOutput

__all__ = ["ParaformerDecodeStrategy", "cif_spans", "span_fields"]


def cif_spans(fires: np.ndarray, num_tokens: int, num_frames: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """One row's per-token (starts, ends) in encoder frames from its fire mask (T'',) bool:
    token ``k`` runs from token ``k - 1``'s fire frame (0 for the first) to one past its own,
    clamped to the row's ``num_frames``."""
    fired = np.flatnonzero(fires)[:num_tokens].astype(np.float64)
    if len(fired) < num_tokens:  # float rounding left a token without its fire frame
        fired = np.concatenate([fired, np.full(num_tokens - len(fired), float(num_frames - 1))])
    ends = np.minimum(fired + 1.0, float(max(num_frames, 1)))
    starts = np.concatenate([[0.0], np.minimum(fired[:-1], ends[:-1])]) if num_tokens else fired
    return starts, ends


def span_fields(cif: Any, logits: torch.Tensor, drop: set[int]) -> list[dict[str, Any]]:
    """Per row, as host lists: the kept token ids, their CIF spans (starts, ends, frames) and
    posteriors. One device->host copy per tensor for the whole batch."""
    ids = logits.argmax(-1)
    probs = torch.softmax(logits, dim=-1).gather(-1, ids[..., None]).squeeze(-1)
    ids_h, probs_h = ids.cpu().numpy(), probs.float().cpu().numpy()
    fires_h, lens_h = cif.fires.cpu().numpy(), cif.token_lens.cpu().numpy()
    rows = []
    for b in range(ids_h.shape[0]):
        k = int(lens_h[b])
        starts, ends = cif_spans(fires_h[b], k, fires_h.shape[1])
        keep = [i for i in range(k) if int(ids_h[b, i]) not in drop]
        rows.append({"ids": [int(ids_h[b, i]) for i in keep], "starts": starts[keep],
                     "ends": ends[keep], "probs": probs_h[b, keep].astype(np.float64)})
    return rows


class ParaformerDecodeStrategy(FrameSyncStrategy):
    """Non-incremental: one ``decode_offline`` call per micro-batch."""

    name = "paraformer"
    consumes = "hidden"
    capability = "paraformer"
    options_cls = None
    selective_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options, **kwargs)
        cfg = model.config
        self.drop = {int(cfg.blank_id), int(cfg.sos_id), int(cfg.eos_id)}

    def n_best_limit(self) -> tuple[int, str]:
        return 1, "decode family 'paraformer' is one-shot argmax"

    def decode_offline(self, hidden: torch.Tensor, hidden_lens: torch.Tensor | None,
                       requests: list[Request]) -> list[RequestOutput]:
        """hidden (B, T, C), hidden_lens (B,) from ``encode_offline`` -> one output per
        request."""
        if hidden_lens is None:
            raise ValueError("paraformer needs the encoder's per-row lengths")
        cif = self.model.predict(hidden, hidden_lens)
        if cif.embeds.shape[1] == 0:  # no row fired a token (silence)
            rows = [{"ids": [], "starts": np.zeros(0), "ends": np.zeros(0),
                     "probs": np.zeros(0)} for _ in requests]
        else:
            rows = span_fields(cif, self.model.nar_decode(cif, hidden, hidden_lens), self.drop)
        clock = self.clock
        outputs = []
        for request, row in zip(requests, rows):
            ids = row["ids"]
            text = self.tokenizer.decode(ids).strip() if self.tokenizer is not None else ""
            out = RequestOutput(request_id=request.request_id, text=text, token_ids=ids,
                                finish_reason="stop", metadata=request.metadata)
            if request.decoding.word_timestamps:
                if clock is None:
                    raise ValueError("word timings need the frame clock (FrameClock.resolve)")
                fill_word_timings(out, self.tokenizer, ids, row["starts"], row["ends"],
                                  row["probs"], clock)
            else:
                out.confidence = mean_posterior(row["probs"])
            outputs.append(out)
        return outputs
