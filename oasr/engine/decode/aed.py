"""The ``aed`` family: attention encoder-decoder (Whisper) on the incremental AR protocol.

Greedy and sampled rows decode in merged groups (``IncrementalArStrategy``); a request with
``beam_size > 1`` decodes in a beam group (``incremental_beam.ArBeamGroup``). Logit processing
follows the checkpoint: ``suppress_tokens`` every step, ``begin_suppress_tokens`` on the first
generated token. ``task`` and ``language`` substitute the prompt's slots (length-preserving, so
a mixed batch prefills as one tensor); a multilingual checkpoint with no language given
detects it from the first decoder step and reports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from oasr.engine.decode.incremental import ArRow, GreedyGroup, IncrementalArStrategy
from oasr.engine.decode.incremental_beam import ArBeamGroup
from oasr.engine.decode.options import option
from oasr.engine.decode.sampling import RowSampling
from oasr.engine.decode.timestamp_rules import (
    TimestampVocab,
    apply_timestamp_rules,
    window_result,
)
from oasr.engine.request import Request, RequestOutput
from oasr.engine.step_budget import StepBudget


@dataclass
class AedOptions:
    beam_size: int = option(1, doc="Beam width; 1 is greedy (or sampling when a request sets "
                                   "temperature > 0).")
    length_penalty: float = option(1.0, doc="Beam ranking: sum log p / length ** length_penalty.")
    eos_check_interval: int = option(1, doc="Decoder steps between host reads of the end flags.")
    merge_groups: bool = option(True, doc="Absorb a newly prefilled micro-batch into a group "
                                          "already generating.")
    repetition_guard: int = option(0, doc="Stop a row whose generated tail repeats the same "
                                          "n-gram this many times (0: off).")
    compact_fraction: float = option(0.25, doc="Compact a decode group (copy out its finished "
                                               "rows' KV) once this fraction of it finished; "
                                               "0 compacts at every finish.")

    def validate(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.eos_check_interval < 1:
            raise ValueError("eos_check_interval must be >= 1")
        if not 0.0 <= self.compact_fraction <= 1.0:
            raise ValueError("compact_fraction must be in [0, 1]")
        if self.repetition_guard < 0 or self.repetition_guard == 1:
            raise ValueError("repetition_guard must be 0 (off) or >= 2")


class AedDecodeStrategy(IncrementalArStrategy):
    name = "aed"
    capability = "aed"
    options_cls = AedOptions
    selective_options: ClassVar[tuple[str, ...]] = ("task", "language", "timestamps")

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or AedOptions(), **kwargs)
        cfg = model.config
        self.cfg = cfg
        self.eos_id = cfg.eos_token_id
        vocab = cfg.vocab_size
        self._suppress = torch.tensor(sorted(set(cfg.suppress_tokens)), dtype=torch.long)
        self._begin_suppress = torch.tensor(sorted(set(cfg.begin_suppress_tokens)),
                                            dtype=torch.long)
        self._id_to_lang = {i: c for c, i in cfg.lang_to_id.items() if i < vocab}
        self._ts_vocab = None
        if cfg.timestamp_begin is not None:
            self._ts_vocab = TimestampVocab(cfg.eos_token_id, cfg.no_timestamps_token_id,
                                            cfg.timestamp_begin)
        self.beams: list[ArBeamGroup] = []

    # -- admission ------------------------------------------------------------------------
    def validate_options(self, decoding: Any) -> None:
        super().validate_options(decoding)
        # The checkpoint decides which tasks and languages exist.
        self.cfg.prompt_ids(task=decoding.task, language=decoding.language)
        if self.options.beam_size > 1 and decoding.sampling:
            raise ValueError("sampling (temperature > 0) cannot be combined with beam search; "
                             "set beam_size=1 or temperature=0")
        if decoding.timestamps and self.options.beam_size > 1:
            raise ValueError("timestamps (Whisper's timestamp mode) run greedy only; set "
                             "beam_size=1")
        if decoding.timestamps and self._ts_vocab is None:
            raise ValueError("this checkpoint declares no <|notimestamps|> token, so it has no "
                             "timestamp mode")
        if decoding.n_best is not None and decoding.n_best > self.options.beam_size:
            raise ValueError(f"n_best={decoding.n_best} exceeds beam_size="
                             f"{self.options.beam_size}; raise beam_size")

    def _max_new(self, decoding: Any) -> int:
        """The request's cap: it lowers the engine's and the decoder's, never raises them (a
        larger request is clamped and ends with finish_reason "length")."""
        engine_cap = self.engine_config.max_new_tokens if self.engine_config else 224
        cap = min(engine_cap, self.cfg.max_target_positions - len(self.cfg.sot_sequence))
        return cap if decoding.max_new_tokens is None else min(cap, decoding.max_new_tokens)

    # -- prefill --------------------------------------------------------------------------
    def detect_language(self, enc: torch.Tensor) -> list[str]:
        """The most likely language per row from the decoder's first step after SOT."""
        if not self.cfg.lang_to_id:
            raise ValueError("language detection needs a multilingual checkpoint")
        sot = torch.full((enc.shape[0], 1), self.cfg.decoder_start_token_id, device=enc.device)
        logits = self.model.decoder.forced_logits(enc, sot)[:, 0].float()
        ids = torch.tensor(sorted(self._id_to_lang), device=enc.device)
        best = ids[logits.index_select(1, ids).argmax(-1)].tolist()
        return [self._id_to_lang[i] for i in best]

    def _prompts(self, requests: list[Request], enc: torch.Tensor) -> tuple[torch.Tensor,
                                                                             list[str | None]]:
        # Reported as the checkpoint spells its codes, whatever case the request used.
        langs: list[str | None] = [None if r.decoding.language is None
                                   else r.decoding.language.strip().lower()
                                   for r in requests]
        if self.cfg.is_multilingual:
            todo = [i for i, lang in enumerate(langs) if lang is None]
            if todo:
                idx = torch.tensor(todo, device=enc.device)
                for i, lang in zip(todo, self.detect_language(enc.index_select(0, idx))):
                    langs[i] = lang
        else:
            langs = ["en" for _ in requests]
        prompts = [self.cfg.prompt_ids(task=r.decoding.task,
                                       language=langs[i] if self.cfg.is_multilingual else None)
                   for i, r in enumerate(requests)]
        if requests[0].decoding.timestamps:  # begin_offline prefills the two modes apart
            nots = self.cfg.no_timestamps_token_id
            prompts = [[t for t in p if t != nots] for p in prompts]
        return torch.tensor(prompts, device=enc.device), langs

    def prefill_rows(self, requests: list[Request], enc: torch.Tensor,
                     enc_lens: torch.Tensor | None) -> tuple[torch.Tensor, Any, list[ArRow]]:
        prompt, langs = self._prompts(requests, enc)
        rows = []
        for r, lang in zip(requests, langs):
            d = r.decoding
            sampling = None
            if d.sampling:
                gen = None
                if d.seed is not None:
                    gen = torch.Generator(device=enc.device)
                    gen.manual_seed(d.seed)
                sampling = RowSampling(d.temperature, d.top_k, d.top_p, gen)
            rows.append(ArRow(r, self._max_new(d), sampling,
                              {"language": lang, "timestamps": d.timestamps}))
        # Sized on the full SOT sequence so both prompt modes get equal capacity and merge.
        cap = len(self.cfg.sot_sequence) + max(row.max_new for row in rows)
        logits, state = self.model.decoder.prefill(enc, prompt, cap, enc_lens)
        return logits, state, rows

    def begin_offline(self, requests: list[Request], enc: torch.Tensor,
                      enc_lens: torch.Tensor | None) -> None:
        if self.options.beam_size == 1:
            # The two prompt modes differ in length, so they prefill apart (and merge after).
            for mode in (False, True):
                idx = [i for i, r in enumerate(requests) if r.decoding.timestamps == mode]
                if not idx:
                    continue
                if len(idx) == len(requests):
                    super().begin_offline(requests, enc, enc_lens)
                    return
                t = torch.tensor(idx, device=enc.device)
                super().begin_offline([requests[i] for i in idx], enc.index_select(0, t),
                                      None if enc_lens is None else enc_lens.index_select(0, t))
            return
        logits, state, rows = self.prefill_rows(requests, enc, enc_lens)
        self.beams.append(ArBeamGroup(
            rows, state, self.model.decoder, self.process_logits(logits.float(), first=True),
            beam_size=self.options.beam_size, eos_id=self.eos_id,
            length_penalty=self.options.length_penalty,
        ))

    # -- steps ----------------------------------------------------------------------------
    def process_logits(self, logits: torch.Tensor, first: bool,
                       group: GreedyGroup | None = None) -> torch.Tensor:
        if self._suppress.numel():
            logits = logits.index_fill(1, self._suppress.to(logits.device), float("-inf"))
        if first and self._begin_suppress.numel():
            logits = logits.index_fill(1, self._begin_suppress.to(logits.device), float("-inf"))
        if group is not None and self._ts_vocab is not None:
            rows = [i for i, r in enumerate(group.rows) if r.extra.get("timestamps")]
            if rows:
                # Timestamp mode reads each row's history back: one sync per step.
                idx = torch.tensor(rows, device=logits.device)
                ngen = group.ngen.index_select(0, idx).tolist()
                out = group.out.index_select(0, idx).tolist()
                history = [seq[:n] for seq, n in zip(out, ngen)]
                ruled = apply_timestamp_rules(logits.index_select(0, idx), history,
                                              self._ts_vocab)
                logits = logits.index_copy(0, idx, ruled)
        return logits

    def advance(self, budget: StepBudget) -> list[RequestOutput]:
        if not self.beams:
            return super().advance(budget)
        while self.beams and budget.take():
            g = self.beams[0]
            logits = None
            if g.active_rows:  # none when every row finished on its first token
                logits = self.process_logits(
                    self.model.decoder.step(g.last, g.state).float(), first=False)
            for row, tokens, logps, reason, nbest in g.step(logits):
                out = self.finish_row(row, tokens, logps, reason)
                n = row.request.decoding.n_best
                if n:
                    out.nbest_texts = [self.tokenizer.decode(t) for t in nbest[:n]]
                self._finished.append(out)
            if g.empty:
                self.beams.pop(0)
        out, self._finished = self._finished, []
        return out

    def has_pending(self) -> bool:
        return super().has_pending() or bool(self.beams)

    @property
    def active_rows(self) -> int:
        return super().active_rows + sum(g.active_rows for g in self.beams)

    def finish_row(self, row: ArRow, tokens: list[int], logps: list[float],
                   finish_reason: str) -> RequestOutput:
        segments = resume = None
        if row.extra.get("timestamps") and self._ts_vocab is not None:
            # Only the segments the window settled count; the text is theirs.
            settled, resume = window_result(tokens, self._ts_vocab)
            segments = [(seg.start, seg.end, self.tokenizer.decode(seg.tokens).strip())
                        for seg in settled]
            text = " ".join(seg[2] for seg in segments if seg[2])
        else:
            text = self.tokenizer.decode(tokens).strip() if self.tokenizer is not None else ""
        conf = None
        if logps:
            # The mean token posterior: a product would rank long transcripts below short ones.
            total = 0.0
            for lp in logps:
                total += math.exp(lp)
            conf = total / len(logps)
        return RequestOutput(
            request_id=row.request.request_id, text=text, token_ids=tokens,
            finish_reason=finish_reason, language=row.extra.get("language"), confidence=conf,
            segments=segments, resume_at=resume, metadata=row.request.metadata,
        )
