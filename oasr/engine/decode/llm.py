"""The ``llm`` family: a speech LLM (Qwen2-Audio) on the incremental AR protocol.

Prefill renders the checkpoint's ChatML template around the instruction (a request's
``prompt``, else the engine's ``llm_prompt``, else the checkpoint's), encodes the text on both
sides of the audio through the tokenizer axis, expands the audio placeholder to one
``<|AUDIO|>`` per audio embedding of the row, left-pads the rows to one width and splices the
projected audio embeddings in (one gather on the device). Decoding is then the shared
``IncrementalArStrategy``: greedy or sampled rows in merged groups over dense or paged KV,
steps replayed from CUDA graphs on paged storage, a row ending on any of the checkpoint's
stop ids (``finish_reason`` "stop"), its cap ("length") or the repetition guard.

Token-streaming partials (``stream_partials``): when the host reads the end flags (every
``eos_check_interval`` steps, a read the loop makes anyway) it also reads the new tokens and
queues a ``TokenPartial`` per row (its new ids and their text, detokenized incrementally);
``take_partials()`` drains the queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from oasr.engine.config import DEFAULT_MAX_NEW_TOKENS
from oasr.engine.decode.incremental import ArRow, GreedyGroup, IncrementalArStrategy
from oasr.engine.decode.options import option
from oasr.engine.decode.sampling import RowSampling
from oasr.engine.decoder_graph import DEFAULT_MAX_CAPTURES
from oasr.engine.request import Request, RequestOutput

# Positions reserved per row for a request's own instruction beyond the default's.
PROMPT_HEADROOM = 64


@dataclass
class LlmOptions:
    llm_prompt: str | None = option(None, doc="The instruction for every request of the "
                                              "engine (a request's prompt replaces it); None: "
                                              "the checkpoint's.")
    max_new_tokens: int | None = option(None, doc="Tokens generated at most per request "
                                                  "(None: the engine's cap; the checkpoint's "
                                                  "generation_config.json sets it when it has "
                                                  "max_new_tokens).")
    stream_partials: bool = option(False, doc="Queue token-streaming partials (take_partials) "
                                              "at every host read of the end flags.")
    eos_check_interval: int = option(0, doc="Decoder steps between host reads of the end "
                                            "flags; 0: 8 on CUDA, 1 on CPU.")
    merge_groups: bool = option(True, doc="Absorb a newly prefilled micro-batch into a group "
                                          "already generating.")
    repetition_guard: int = option(0, doc="Stop a row whose generated tail repeats the same "
                                          "n-gram this many times (0: off).")
    compact_fraction: float = option(0.25, doc="Compact a decode group once this fraction of "
                                               "it finished; 0 compacts at every finish.")
    use_step_graphs: bool = option(True, doc="Replay decoder steps from CUDA graphs (CUDA and "
                                             "paged KV only). Off: eager steps.")
    step_graph_max_captures: int = option(
        DEFAULT_MAX_CAPTURES, doc="Decoder-step graphs kept at most; a new step shape past it "
                                  "runs eager.")

    def validate(self) -> None:
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.eos_check_interval < 0:
            raise ValueError("eos_check_interval must be >= 1, or 0 for the device's default")
        if not 0.0 <= self.compact_fraction <= 1.0:
            raise ValueError("compact_fraction must be in [0, 1]")
        if self.repetition_guard < 0 or self.repetition_guard == 1:
            raise ValueError("repetition_guard must be 0 (off) or >= 2")
        if self.step_graph_max_captures < 0:
            raise ValueError("step_graph_max_captures must be >= 0")


@dataclass
class TokenPartial:
    """New tokens of a row still generating (or just finished), and their text."""

    request_id: str
    token_ids: list[int]
    text: str
    final: bool = False


@dataclass
class PromptBatch:
    """Left-padded prompt ids (B, P), padding per row (B,), and for each position the flat
    index ``row * T_audio + frame`` of the audio embedding it takes (-1: a text token)."""

    ids: torch.Tensor
    starts: torch.Tensor
    audio_src: torch.Tensor
    lengths: list[int] = field(default_factory=list)


def build_prompts(before: list[list[int]], after: list[list[int]], audio_lens: list[int],
                  audio_width: int, audio_token_id: int, pad_id: int) -> PromptBatch:
    """Rows ``before + <|AUDIO|> * n + after``, left-padded to the longest."""
    rows = [b + [audio_token_id] * n + a for b, n, a in zip(before, audio_lens, after)]
    width = max(len(r) for r in rows)
    ids, starts, src, lengths = [], [], [], []
    for i, (row, b, n) in enumerate(zip(rows, before, audio_lens)):
        pad = width - len(row)
        ids.append([pad_id] * pad + row)
        starts.append(pad)
        lengths.append(len(row))
        at = pad + len(b)
        index = [-1] * width
        index[at:at + n] = range(i * audio_width, i * audio_width + n)
        src.append(index)
    return PromptBatch(torch.tensor(ids), torch.tensor(starts), torch.tensor(src), lengths)


def splice_audio(embeds: torch.Tensor, audio: torch.Tensor, audio_src: torch.Tensor
                 ) -> torch.Tensor:
    """embeds (B, P, C) with the audio embeddings (B, T, C) gathered in at ``audio_src``."""
    flat = audio.reshape(-1, audio.shape[-1]).to(embeds.dtype)
    gathered = flat.index_select(0, audio_src.clamp(min=0).reshape(-1)).view_as(embeds)
    return torch.where((audio_src >= 0)[..., None], gathered, embeds)


class LlmDecodeStrategy(IncrementalArStrategy):
    name = "llm"
    capability = "llm"
    options_cls = LlmOptions
    selective_options: ClassVar[tuple[str, ...]] = ("prompt",)

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or LlmOptions(), **kwargs)
        if self.tokenizer is None:
            raise ValueError("the llm family needs the checkpoint's tokenizer (to encode the "
                             "ChatML prompt)")
        cfg = model.config
        self.cfg = cfg
        self.stop_ids = tuple(cfg.eos_token_ids)
        self.eos_id = cfg.eos_token_ids[0]
        self._prompt_ids: dict[str | None, tuple[list[int], list[int]]] = {}
        self._partials: list[TokenPartial] = []
        before, after = self._encoded(self.options.llm_prompt)
        self._row_positions = min(
            len(before) + cfg.audio_frames + len(after) + PROMPT_HEADROOM + self._engine_cap,
            cfg.max_position_embeddings)
        self.setup_decoder_kv(self._row_positions, greedy=True)
        # Checkpoints pad the embedding past the tokenizer (Qwen2-Audio: 156,032 rows for
        # 151,649 ids); a padded row is no token, so it is never chosen.
        self._decodable = min(int(self.tokenizer.vocab_size), int(cfg.vocab_size))

    def process_logits(self, logits: torch.Tensor, first: bool,
                       group: GreedyGroup | None = None) -> torch.Tensor:
        if logits.shape[-1] > self._decodable:
            logits = logits.clone()
            logits[..., self._decodable:] = float("-inf")
        return logits

    @property
    def _engine_cap(self) -> int:
        """The family's cap (``max_new_tokens``) where set, else the engine's."""
        if self.options.max_new_tokens is not None:
            return self.options.max_new_tokens
        cfg = self.engine_config
        return cfg.max_new_tokens if cfg is not None else DEFAULT_MAX_NEW_TOKENS

    def _encoded(self, instruction: str | None) -> tuple[list[int], list[int]]:
        ids = self._prompt_ids.get(instruction)
        if ids is None:
            before, after = self.cfg.render_prompt(instruction)
            ids = (self.tokenizer.encode(before), self.tokenizer.encode(after))
            self._prompt_ids[instruction] = ids
        return ids

    def _instruction(self, request: Request) -> str | None:
        p = request.decoding.prompt
        return p if p is not None else self.options.llm_prompt

    def validate_options(self, decoding: Any) -> None:
        super().validate_options(decoding)
        if decoding.n_best is not None and decoding.n_best > 1:
            raise ValueError("the llm family decodes greedy or sampled, one hypothesis per "
                             "request; n_best > 1 is not served")
        if isinstance(decoding.prompt, list):
            raise ValueError("the llm family takes a text prompt (an instruction), not token "
                             "ids")

    # -- prefill --------------------------------------------------------------------------
    def prefill_rows(self, requests: list[Request], enc: torch.Tensor,
                     enc_lens: torch.Tensor | None) -> tuple[torch.Tensor, Any, list[ArRow]]:
        dev = enc.device
        lens = ([enc.shape[1]] * enc.shape[0] if enc_lens is None
                else [int(n) for n in enc_lens.tolist()])  # one read per prefill
        encoded = [self._encoded(self._instruction(r)) for r in requests]
        batch = build_prompts([e[0] for e in encoded], [e[1] for e in encoded], lens,
                              enc.shape[1], self.cfg.audio_token_id, self.cfg.pad_token_id)
        width = batch.ids.shape[1]
        room = self.cfg.max_position_embeddings - width
        if room < 1:
            raise ValueError(f"the prompt ({width} tokens) leaves no room in the model's "
                             f"{self.cfg.max_position_embeddings} positions")
        rows = []
        for r in requests:
            d = r.decoding
            cap = min(self._engine_cap, room)
            max_new = cap if d.max_new_tokens is None else min(cap, d.max_new_tokens)
            sampling = None
            if d.sampling:
                gen = None
                if d.seed is not None:
                    gen = torch.Generator(device=dev)
                    gen.manual_seed(d.seed)
                sampling = RowSampling(d.temperature, d.top_k, d.top_p, gen)
            rows.append(ArRow(r, max_new, sampling, {"sent": 0, "detok": None}))
        ids = batch.ids.to(dev)
        embeds = splice_audio(self.model.decoder.embed(ids), enc, batch.audio_src.to(dev))
        capacity = width + max(row.max_new for row in rows)
        logits, state = self.model.decoder.prefill_embeds(embeds, batch.starts.to(dev),
                                                          capacity, pool=self.kv_pool)
        return logits, state, rows

    # -- partials -------------------------------------------------------------------------
    def take_partials(self) -> list[TokenPartial]:
        """The partials queued since the last call (``stream_partials`` on)."""
        out, self._partials = self._partials, []
        return out

    def _retire(self, gi: int) -> None:
        if self.options.stream_partials:
            self._queue_partials(self.groups[gi])
        super()._retire(gi)

    def _queue_partials(self, g: GreedyGroup) -> None:
        live = [i for i, e in enumerate(g.emitted) if not e]
        if not live:
            return
        ngen = g.ngen.tolist()
        upto = max(ngen[i] for i in live)
        out = g.out[:, :upto].tolist()
        stops = set(self.stop_ids)
        for i in live:
            row = g.rows[i]
            new = [t for t in out[i][row.extra["sent"]:ngen[i]] if t not in stops]
            row.extra["sent"] = ngen[i]
            if not new:
                continue
            text, row.extra["detok"] = self.tokenizer.decode_incremental(new, row.extra["detok"])
            self._partials.append(TokenPartial(row.request.request_id, new, text))

    # -- finishing ------------------------------------------------------------------------
    def finish_row(self, row: ArRow, tokens: list[int], logps: list[float],
                   finish_reason: str) -> RequestOutput:
        if self.options.stream_partials:
            tail = self.tokenizer.flush_incremental(row.extra["detok"])
            self._partials.append(TokenPartial(row.request.request_id, [], tail, final=True))
        conf = None
        if logps:
            total = 0.0
            for lp in logps:
                total += math.exp(lp)
            conf = total / len(logps)
        return RequestOutput(
            # As transformers' batch_decode(skip_special_tokens=True) renders them: a leading
            # space the tokens carry stays.
            request_id=row.request.request_id, text=self.tokenizer.decode(tokens),
            token_ids=tokens, finish_reason=finish_reason, confidence=conf,
            avg_logprob=sum(logps) / len(logps) if logps else None,
            metadata=row.request.metadata,
        )
