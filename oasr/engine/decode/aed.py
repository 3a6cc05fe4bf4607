"""The ``aed`` family: attention encoder-decoder (Whisper) on the incremental AR protocol.

Greedy and sampled rows decode in merged groups (``IncrementalArStrategy``; a sampled request
with ``best_of > 1`` as that many candidates); a request with ``beam_size > 1`` decodes in a
beam group (``incremental_beam.ArBeamGroup``). Logit processing is per request
(``logit_rules.py``): ``suppress_tokens`` every step (-1: the checkpoint's list),
``begin_suppress_tokens`` on the first generated token (``suppress_blank``), the repetition
penalty and n-gram blocking. The decoder input is ``whisper_prompt.py``'s: a context after
``<|startofprev|>`` (hotwords, previous text), the SOT sequence (``task`` and ``language``
substituted; a multilingual checkpoint with no language given detects it from the first
decoder step and reports it with its probabilities) and the forced prefix; rows of different
prompt lengths prefill left-padded, each row's first token at position 0. ``no_speech_prob``
is read after ``<|startoftranscript|>`` in the same prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from oasr.engine.config import DEFAULT_MAX_NEW_TOKENS
from oasr.engine.decode.alignment import fill_word_timings
from oasr.engine.decode.attention_align import align_rows
from oasr.engine.decode.incremental import ArRow, GreedyGroup, IncrementalArStrategy
from oasr.engine.decode.incremental_beam import ArBeamGroup
from oasr.engine.decode.logit_rules import BatchRules, RowRules
from oasr.engine.decode.options import option
from oasr.engine.decode.pauses import speech_pauses
from oasr.engine.decode.sampling import RowSampling
from oasr.engine.decode.timestamp_rules import (
    TimestampVocab,
    apply_timestamp_rules,
    settled_tokens,
    window_result,
)
from oasr.engine.decode.whisper_prompt import WhisperPrompter
from oasr.engine.decoder_graph import DEFAULT_MAX_CAPTURES
from oasr.engine.request import CHECKPOINT_SUPPRESS, DecodingOptions, Request, RequestOutput
from oasr.engine.step_budget import StepBudget
from oasr.native import native

# Cross K/V held for the word-timing pass before it runs early (see _queue_alignment): a batch
# of 64 tiny.en rows holds about 0.6 GB, of large-v3 rows about 16 GB.
ALIGN_QUEUE_BYTES = 4 << 30


@dataclass
class AedOptions:
    beam_size: int = option(1, doc="Beam width; 1 is greedy (or sampling when a request sets "
                                   "temperature > 0).")
    length_penalty: float = option(1.0, doc="Ranking of beam hypotheses and best_of candidates: "
                                          "sum log p / length ** length_penalty (a request's "
                                          "length_penalty overrides it).")
    eos_check_interval: int = option(0, doc="Decoder steps between host reads of the end "
                                            "flags; 0: 8 on CUDA (measured 3.4x at batch 64 on "
                                            "an H200), 1 on CPU.")
    merge_groups: bool = option(True, doc="Absorb a newly prefilled micro-batch into a group "
                                          "already generating.")
    repetition_guard: int = option(0, doc="Stop a row whose generated tail repeats the same "
                                          "n-gram this many times (0: off).")
    compact_fraction: float = option(0.25, doc="Compact a decode group (copy out its finished "
                                               "rows' KV) once this fraction of it finished; "
                                               "0 compacts at every finish.")
    use_step_graphs: bool = option(True, doc="Replay greedy decoder steps from CUDA graphs "
                                             "(CUDA and paged KV only; kv_storage=auto pages "
                                             "exactly when this is on). Off: eager steps.")
    step_graph_max_captures: int = option(
        DEFAULT_MAX_CAPTURES, doc="Decoder-step graphs kept at most; a new step shape past it "
                                  "runs eager.")
    pause_snap_db: float = option(35.0, doc="Word timings: move token spans off pauses "
                                            "(>= 0.3 s of frames this many dB under the "
                                            "audio's loud frames, or within pause_floor_db of "
                                            "its noise floor); 0: raw DTW spans.")
    pause_floor_db: float = option(12.0, doc="Word timings: a frame less than this many dB "
                                             "over the audio's noise floor is a pause frame.")
    max_prompt_tokens: int | None = option(
        None, doc="A request's prompt (<|startofprev|> + text) keeps its last this many "
                  "tokens; None: Whisper's max_target_positions // 2 - 1 (223). Every row "
                  "reserves decoder KV for it; 0: prompts are refused and nothing is "
                  "reserved.")

    def validate(self) -> None:
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.eos_check_interval < 0:
            raise ValueError("eos_check_interval must be >= 1, or 0 for the device's default")
        if not 0.0 <= self.compact_fraction <= 1.0:
            raise ValueError("compact_fraction must be in [0, 1]")
        if self.pause_snap_db < 0:
            raise ValueError("pause_snap_db must be >= 0 (0: off)")
        if self.pause_floor_db < 0:
            raise ValueError("pause_floor_db must be >= 0")
        if self.repetition_guard < 0 or self.repetition_guard == 1:
            raise ValueError("repetition_guard must be 0 (off) or >= 2")
        if self.step_graph_max_captures < 0:
            raise ValueError("step_graph_max_captures must be >= 0")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 0:
            raise ValueError("max_prompt_tokens must be >= 0 (0: prompts refused), or none")


class AedDecodeStrategy(IncrementalArStrategy):
    name = "aed"
    capability = "aed"
    options_cls = AedOptions
    selective_options: ClassVar[tuple[str, ...]] = (
        "task", "language", "prompt", "timestamps", "prefix", "hotwords", "suppress_tokens",
        "suppress_blank", "repetition_penalty", "no_repeat_ngram_size", "patience",
        "length_penalty")
    serves_best_of = True

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        super().__init__(model, options or AedOptions(), **kwargs)
        cfg = model.config
        self.cfg = cfg
        self.eos_id = cfg.eos_token_id
        # The tokenizer's specials an explicit suppress_tokens list adds (faster-whisper's
        # get_suppressed_tokens; the checkpoint's own list already holds them).
        self._specials = tuple(t for t in (getattr(self.tokenizer, n, None) for n in (
            "transcribe", "translate", "sot", "sot_prev", "sot_lm", "no_speech"))
            if isinstance(t, int))
        self._row_rules: dict[tuple, RowRules] = {}
        self._plain = DecodingOptions()
        self._batch_cache: dict[tuple, BatchRules] = {}
        # Whisper's prompt tokens: <|startofprev|> opens a prompt, and the no-speech
        # probability is read after <|startoftranscript|> (None: the tokenizer has neither).
        self._sot_prev: int | None = getattr(self.tokenizer, "sot_prev", None)
        self._no_speech: int | None = getattr(self.tokenizer, "no_speech", None)
        limit = self.options.max_prompt_tokens
        self._prompt_limit = cfg.max_target_positions // 2 - 1 if limit is None else limit
        # A row reserves its prompt, the full SOT sequence and the engine's cap (what _max_new
        # allows); a prefill group never reaches past it (_prefill_groups).
        engine_cap = self._engine_cap
        sot = len(cfg.sot_sequence)
        prompt = 1 + self._prompt_limit if self._prompt_limit else 0
        self._row_positions = min(cfg.max_target_positions, prompt + sot + engine_cap)
        self.setup_decoder_kv(self._row_positions, greedy=self.options.beam_size == 1)
        self.prompter = WhisperPrompter(cfg, self.tokenizer, self._prompt_limit)
        self._ts_vocab = None
        if cfg.timestamp_begin is not None:
            self._ts_vocab = TimestampVocab(cfg.eos_token_id, cfg.no_timestamps_token_id,
                                            cfg.timestamp_begin)
        self.beams: list[ArBeamGroup] = []
        # Finished rows waiting for the alignment pass at the end of the current advance.
        self._align_queue: list[tuple[list[ArRow], list[RequestOutput], list[torch.Tensor],
                                      list[torch.Tensor]]] = []
        self._align_queued_bytes = 0
        # Generated ids that are not text: end of text and the prompt's specials.
        self._not_text = {cfg.eos_token_id, cfg.decoder_start_token_id, *cfg.sot_sequence,
                          *cfg.lang_to_id.values(), *cfg.task_to_id.values()}
        if cfg.no_timestamps_token_id is not None:
            self._not_text.add(cfg.no_timestamps_token_id)
        self._first_timestamp = cfg.timestamp_begin

    # -- admission ------------------------------------------------------------------------
    def validate_options(self, decoding: Any) -> None:
        if decoding.hotwords_score is not None:
            raise ValueError("Whisper's hotwords are a prompt (faster-whisper's); "
                             "hotwords_score is the CTC / transducer boost: leave it unset")
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
        if decoding.prompt is not None or WhisperPrompter.hotwords_text(decoding.hotwords):
            if self._sot_prev is None or not hasattr(self.tokenizer, "encode"):
                raise ValueError("a prompt or hotwords need the checkpoint's Whisper tokenizer "
                                 "(with <|startofprev|>) to encode them; load the model with "
                                 "its tokenizer")
        if decoding.prompt is not None or decoding.hotwords or decoding.prefix:
            if not self._prompt_limit:
                raise ValueError("prompts are off in this engine (max_prompt_tokens=0), and a "
                                 "prompt, hotwords or a prefix take that room; set -d "
                                 "max_prompt_tokens=none (Whisper's 223) or a positive count")
        if decoding.prefix and not hasattr(self.tokenizer, "encode"):
            raise ValueError("a prefix needs the checkpoint's tokenizer to encode it; load the "
                             "model with its tokenizer")
        bad = [t for t in decoding.suppress_tokens or () if t >= self.cfg.vocab_size]
        if bad:
            raise ValueError(f"suppress_tokens {bad} are not ids of this checkpoint's "
                             f"{self.cfg.vocab_size}-token vocabulary")

    @property
    def _engine_cap(self) -> int:
        cfg = self.engine_config
        return cfg.max_new_tokens if cfg is not None else DEFAULT_MAX_NEW_TOKENS

    @property
    def default_length_penalty(self) -> float:
        return self.options.length_penalty

    def _max_new(self, decoding: Any, reserved: int = 0) -> int:
        """The request's cap on generated tokens: it lowers the engine's and the decoder's,
        never raises them (a larger request is clamped and ends with finish_reason "length").
        ``reserved``: the context and prefix tokens, which take decoder positions too."""
        cap = min(self._engine_cap,
                  self.cfg.max_target_positions - reserved - len(self.cfg.sot_sequence))
        return cap if decoding.max_new_tokens is None else min(cap, decoding.max_new_tokens)

    # -- prefill --------------------------------------------------------------------------
    def prefill_rows(self, requests: list[Request], enc: torch.Tensor,
                     enc_lens: torch.Tensor | None) -> tuple[torch.Tensor, Any, list[ArRow]]:
        """Prefill one group (``_prefill_groups``: one prompt mode, one forced length): each
        row's context, SOT sequence and forced prefix, left-padded to the longest, so every
        row's first token sits at position 0."""
        parts = [self.prompter.parts(r.decoding) for r in requests]
        langs = self.prompter.languages(self.model.decoder, requests, enc)
        rows, seqs, sot_len = [], [], 0
        for r, part, (lang, guess) in zip(requests, parts, langs):
            d = r.decoding
            sampling = None
            if d.sampling:
                gen = None
                if d.seed is not None:
                    gen = torch.Generator(device=enc.device)
                    gen.manual_seed(d.seed)
                sampling = RowSampling(d.temperature, d.top_k, d.top_p, gen)
            extra = {"language": lang, "timestamps": d.timestamps}
            if guess is not None:
                extra["language_guess"] = guess
            rows.append(ArRow(r, len(part.forced) + self._max_new(d, part.reserved), sampling,
                              extra, forced=list(part.forced)))
            sot = self.prompter.sot(d, lang)
            sot_len = len(sot)  # one prompt mode per prefill: one length
            seqs.append([*part.context, *sot, *part.forced])
        width = max(len(s) for s in seqs)
        pad = self.cfg.pad_token_id if self.cfg.pad_token_id is not None else self.eos_id
        prompt = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=enc.device)
        starts = torch.tensor([width - len(s) for s in seqs], device=enc.device)
        # Sized on the full SOT sequence so both prompt modes get equal capacity and merge.
        longest = max(p.reserved for p in parts)
        cap = longest + len(self.cfg.sot_sequence) + max(
            row.max_new - len(row.forced) for row in rows)
        pool = self.kv_pool if self.options.beam_size == 1 else None  # beams stay dense
        # <|startoftranscript|> sits as far from every row's end (one forced length per prefill)
        score_at = width - len(parts[0].forced) - sot_len if self._no_speech is not None else None
        logits, state, sot_logits = self.model.decoder.prefill_scored(
            enc, prompt, cap, enc_lens, pool=pool, starts=starts, score_at=score_at)
        if sot_logits is not None:
            # Whisper's no_speech_prob: softmax of the raw logits after SOT. Kept on the
            # device; read when the row finishes (a host read there is already due).
            no_speech = torch.softmax(sot_logits.float(), dim=-1)[:, self._no_speech]
            for i, row in enumerate(rows):
                row.extra["no_speech"] = no_speech[i]
        for i, row in enumerate(rows):
            if row.forced:
                row.forced_logps = self._forced_logps(enc[i:i + 1], seqs[i], row.forced)
        return logits, state, rows

    def _forced_logps(self, enc: torch.Tensor, seq: list[int], forced: list[int]
                      ) -> list[float]:
        """The model's log-probability of each forced token (the raw logits: a prefix is the
        caller's, not subject to the rules), from a teacher-forced pass over ``seq``."""
        logits = self.model.decoder.forced_logits(enc, torch.tensor([seq], device=enc.device))
        at = len(seq) - len(forced) - 1
        lp = torch.log_softmax(logits[0, at:at + len(forced)].float(), dim=-1)
        return lp.gather(1, torch.tensor(forced, device=lp.device)[:, None])[:, 0].tolist()

    def _prefill_groups(self, requests: list[Request]) -> list[list[int]]:
        """Rows that prefill together: one prompt mode (the modes' SOT sequences differ in
        length) and one forced-prefix length (so ``<|startoftranscript|>`` sits in one column),
        and a padded width that leaves every row its own token cap within the row KV
        reservation. Nearly always one group per mode."""
        groups: list[list[int]] = []
        sot = len(self.cfg.sot_sequence)
        parts = [self.prompter.parts(r.decoding) for r in requests]
        modes = sorted({(r.decoding.timestamps, len(p.forced))
                        for r, p in zip(requests, parts)})
        for mode in modes:
            idx = [i for i, (r, p) in enumerate(zip(requests, parts))
                   if (r.decoding.timestamps, len(p.forced)) == mode]
            size = {i: parts[i].reserved for i in idx}
            open_groups: list[tuple[int, int, list[int]]] = []  # (width, max cap, rows)
            for i in sorted(idx, key=lambda j: -size[j]):  # the first row sets the width
                new = self._max_new(requests[i].decoding, size[i])
                for g, (width, most, members) in enumerate(open_groups):
                    if width + sot + max(most, new) <= self._row_positions:
                        open_groups[g] = (width, max(most, new), members + [i])
                        break
                else:
                    open_groups.append((size[i], new, [i]))
            groups += [sorted(members) for _, _, members in open_groups]
        return groups

    def begin_offline(self, requests: list[Request], enc: torch.Tensor,
                      enc_lens: torch.Tensor | None) -> None:
        self.prompter.reset()  # encoded prompts live for one admission
        for idx in self._prefill_groups(requests):
            if len(idx) == len(requests):
                sub, sub_enc, sub_lens = requests, enc, enc_lens
            else:
                t = torch.tensor(idx, device=enc.device)
                sub, sub_enc = [requests[i] for i in idx], enc.index_select(0, t)
                sub_lens = None if enc_lens is None else enc_lens.index_select(0, t)
            if self.options.beam_size == 1:
                super().begin_offline(sub, sub_enc, sub_lens)
            else:
                self._begin_beams(sub, sub_enc, sub_lens)

    def _begin_beams(self, requests: list[Request], enc: torch.Tensor,
                     enc_lens: torch.Tensor | None) -> None:
        logits, state, rows = self.prefill_rows(requests, enc, enc_lens)
        timed = any(r.decoding.word_timestamps for r in requests)
        first = self.process_logits(logits.float(), first=True,
                                    grid=[(row, row.forced) for row in rows])
        self.beams.append(ArBeamGroup(
            rows, state, self.model.decoder, first,
            beam_size=self.options.beam_size, eos_id=self.eos_id,
            length_penalty=self.options.length_penalty,
            keep=self._keep_cross if timed else None,
        ))

    @staticmethod
    def _keep_cross(state: Any, slots: torch.Tensor) -> list[Any]:
        """The cross K/V of beam rows retiring now, one (keys, values) per row (per layer
        (1, H, T_enc, D)): the alignment pass re-forwards the winner against them."""
        keys, values = state.cross.rows(slots)
        return [([k[i:i + 1] for k in keys], [v[i:i + 1] for v in values])
                for i in range(slots.numel())]

    # -- steps ----------------------------------------------------------------------------
    def rules_of(self, decoding: Any) -> RowRules:
        """A request's logit rules (``logit_rules.py``), resolved against the checkpoint."""
        key = (decoding.suppress_tokens, decoding.suppress_blank,
               decoding.repetition_penalty, decoding.no_repeat_ngram_size)
        rules = self._row_rules.get(key)
        if rules is None:
            ids = decoding.suppress_tokens or ()
            suppress: set[int] = set()
            if ids:  # faster-whisper's get_suppressed_tokens
                suppress = {t for t in ids if t >= 0} | set(self._specials)
                if CHECKPOINT_SUPPRESS in ids:
                    suppress |= set(self.cfg.suppress_tokens)
            begin = self.cfg.begin_suppress_tokens if decoding.suppress_blank else ()
            rules = RowRules(tuple(sorted(suppress)), tuple(sorted(set(begin))),
                             decoding.repetition_penalty, decoding.no_repeat_ngram_size)
            self._row_rules[key] = rules
        return rules

    def _batch_rules(self, rules: list[RowRules], logits: torch.Tensor) -> BatchRules:
        """The batch's rules as device tensors, cached: rows sharing one ``RowRules`` (the
        common case) reuse one instance whatever their count, so a new group or a beam step
        uploads nothing."""
        distinct = set(rules)
        key = (tuple(distinct) if len(distinct) == 1 else tuple(rules), logits.device)
        built = self._batch_cache.get(key)
        if built is None:
            if len(self._batch_cache) > 64:
                self._batch_cache.clear()
            built = BatchRules(rules, logits.shape[-1], logits.device)
            self._batch_cache[key] = built
        return built

    def process_logits(self, logits: torch.Tensor, first: bool,
                       group: GreedyGroup | None = None,
                       grid: list[tuple[ArRow, list[int]]] | None = None) -> torch.Tensor:
        """logits (N, V) float -> ruled logits. The rows are ``group``'s (greedy), or
        ``grid``'s (beam slots: each one's row and transcript so far), or else all rows
        follow the default request's rules."""
        history = lengths = None
        if group is not None:
            rules = group.rules
            if rules is None:
                rules = group.rules = self._batch_rules(
                    [self.rules_of(r.request.decoding) for r in group.rows], logits)
            history, lengths = group.out, group.ngen
        else:
            rules = self._batch_rules([self.rules_of(row.request.decoding) for row, _ in grid]
                                      if grid else [self.rules_of(self._plain)], logits)
            if grid and rules.reads_history:
                width = max(1, max(len(tokens) for _, tokens in grid))
                history = torch.tensor([t + [0] * (width - len(t)) for _, t in grid],
                                       device=logits.device)
                lengths = torch.tensor([len(t) for _, t in grid], device=logits.device)
        logits = rules.apply(logits, first, history, lengths)
        if group is not None and self._ts_vocab is not None:
            rows = [i for i, r in enumerate(group.rows) if r.extra.get("timestamps")]
            if rows:
                # Timestamp mode reads each row's history back: one sync per step.
                idx = torch.tensor(rows, device=logits.device)
                ngen = group.ngen.index_select(0, idx).tolist()
                out = group.out.index_select(0, idx).tolist()
                seqs = [seq[:n] for seq, n in zip(out, ngen)]
                ruled = apply_timestamp_rules(logits.index_select(0, idx), seqs, self._ts_vocab)
                logits = logits.index_copy(0, idx, ruled)
        return logits

    def advance(self, budget: StepBudget) -> list[RequestOutput]:
        if not self.beams:
            out = super().advance(budget)
            self._flush_alignment()  # fills the queued rows' outputs in place
            return out
        while self.beams and budget.take():
            g = self.beams[0]
            logits = None
            if g.active_rows:  # none when every row finished on its first token
                logits = self.process_logits(
                    self.model.decoder.step(g.last, g.state).float(), first=False,
                    grid=g.grid())
            timed: list[tuple[ArRow, RequestOutput, Any]] = []
            for row, tokens, logps, reason, nbest, *kept in g.step(logits):
                out = self.finish_row(row, tokens, logps, reason)
                n = row.request.decoding.n_best
                if n:
                    out.nbest_texts = [self.tokenizer.decode(t) for t in nbest[:n]]
                if "align" in row.extra:
                    timed.append((row, out, kept[0]))
                self._finished.append(out)
            for row, out, (keys, values) in timed:
                self._queue_alignment([row], [out], keys, values)
            if g.empty:
                self.beams.pop(0)
        self._flush_alignment()
        out, self._finished = self._finished, []
        return out

    def has_pending(self) -> bool:
        return super().has_pending() or bool(self.beams)

    @property
    def active_rows(self) -> int:
        return super().active_rows + sum(g.active_rows for g in self.beams)

    @property
    def held_rows(self) -> int:
        return super().held_rows + sum(g.state.batch for g in self.beams if g.live)

    @property
    def rows_per_request(self) -> int:
        return self.options.beam_size

    # -- word timings -----------------------------------------------------------------------
    @property
    def word_timing_modes(self) -> tuple[str, ...]:
        """Offline, greedy or beam search, with alignment heads and a resolvable clock. Beam
        search keeps the cross K/V of each row as it retires, and the winning hypothesis takes
        the same teacher-forced pass as a greedy row's."""
        if (not self.cfg.alignment_heads
                or not hasattr(self.model.decoder, "cross_attention_scores")
                or self.clock is None):
            return ()
        return ("offline",)

    def after_finish(self, group: GreedyGroup, indices: list[int],
                     outputs: list[RequestOutput]) -> None:
        asked = [(i, out) for i, out in zip(indices, outputs) if "align" in group.rows[i].extra]
        if not asked:
            return
        idx = torch.tensor([i for i, _ in asked], device=group.last.device)
        cross_k, cross_v = group.state.cross.rows(idx)  # dense or paged storage alike: copies
        self._queue_alignment([group.rows[i] for i, _ in asked], [out for _, out in asked],
                              cross_k, cross_v)

    def _queue_alignment(self, rows: list[ArRow], outputs: list[RequestOutput],
                         cross_k: list[torch.Tensor], cross_v: list[torch.Tensor]) -> None:
        """Hold finished rows (and copies of their cross K/V) until the end of this
        ``advance``: every row finishing in it, across groups and retirements, is then timed in
        one pass. A queue past ``ALIGN_QUEUE_BYTES`` of K/V is timed at once."""
        self._align_queue.append((rows, outputs, cross_k, cross_v))
        self._align_queued_bytes += sum(t.numel() * t.element_size()
                                        for t in (*cross_k, *cross_v))
        if self._align_queued_bytes >= ALIGN_QUEUE_BYTES:
            self._flush_alignment()

    def _flush_alignment(self) -> None:
        """Time every queued row: one pass per cross K/V shape (one for Whisper's fixed
        window), the K/V concatenated per layer."""
        queue, self._align_queue, self._align_queued_bytes = self._align_queue, [], 0
        buckets: dict[tuple, list[tuple]] = {}
        for job in queue:
            key = tuple((tuple(k.shape[1:]), k.dtype, k.device) for k in job[2])
            buckets.setdefault(key, []).append(job)
        for jobs in buckets.values():
            rows = [r for job in jobs for r in job[0]]
            outs = [o for job in jobs for o in job[1]]
            if len(jobs) == 1:
                keys, values = jobs[0][2], jobs[0][3]
            else:
                layers = range(len(jobs[0][2]))
                keys = [torch.cat([job[2][i] for job in jobs]) for i in layers]
                values = [torch.cat([job[3][i] for job in jobs]) for i in layers]
            self._time_words(rows, outs, keys, values)

    def _time_words(self, rows: list[ArRow], outputs: list[RequestOutput],
                    cross_k: list[torch.Tensor], cross_v: list[torch.Tensor]) -> None:
        """Word timings of finished ``rows`` (each holding ``extra["align"]``) from one
        teacher-forced pass against their cross K/V (per layer (R, H, T_enc, D))."""
        clock = self.clock
        sample_rate = self.feature_config.sample_rate
        no_ts = self.cfg.no_timestamps_token_id
        prompts, texts, probs, frames = [], [], [], []
        for row, out in zip(rows, outputs):
            d = row.request.decoding
            prompt = list(self.cfg.prompt_ids(task=d.task, language=row.extra.get("language")
                                              if self.cfg.is_multilingual else None))
            if no_ts is not None and no_ts not in prompt:
                prompt.append(no_ts)
            text, p = row.extra.pop("align")
            prompts.append(prompt)
            texts.append(text)
            probs.append(p)
            seconds = row.request.num_samples / sample_rate
            if out.resume_at is not None:  # the settled text covers the window up to there
                seconds = min(seconds, out.resume_at)
            frames.append(math.ceil(seconds / clock.seconds_per_frame))
        spans = align_rows(self.model.decoder, prompts, texts, frames, cross_k, cross_v,
                           [tuple(h) for h in self.cfg.alignment_heads], self.eos_id)
        snap = native("alignment").snap_to_pauses
        for row, out, text, p, span in zip(rows, outputs, texts, probs, spans):
            starts, ends = span.starts, span.ends
            pieces = self.tokenizer.token_pieces(text)
            if self.options.pause_snap_db > 0:
                pauses = speech_pauses(row.request.audio, sample_rate,
                                       clock.seconds_per_frame, self.options.pause_snap_db,
                                       self.options.pause_floor_db)
                joins = np.array([not piece[:1].isspace() for piece in pieces], dtype=np.uint8)
                starts, ends = snap(starts, ends, joins, *pauses)
            fill_word_timings(out, self.tokenizer, text, starts, ends,
                              np.asarray(p, dtype=np.float64), clock, pieces=pieces)

    def finish_row(self, row: ArRow, tokens: list[int], logps: list[float],
                   finish_reason: str) -> RequestOutput:
        segments = resume = settled_ids = None
        settled_text: list[int] | None = None
        if row.extra.get("timestamps") and self._ts_vocab is not None:
            # Only the segments the window settled count; the text is theirs.
            settled, resume = window_result(tokens, self._ts_vocab)
            settled_ids = settled_tokens(tokens, self._ts_vocab)
            settled_text = [t for seg in settled for t in seg.tokens]
            segments = [(seg.start, seg.end, self.tokenizer.decode(seg.tokens).strip())
                        for seg in settled]
            text = " ".join(seg[2] for seg in segments if seg[2])
        else:
            text = self.tokenizer.decode(tokens).strip() if self.tokenizer is not None else ""
        # The text tokens (a window's settled ones) and their decode posteriors: what the
        # utterance confidence averages, and what word timings time.
        limit = len(settled_text) if settled_text is not None else None
        # Timestamp ids exist only in timestamp mode (otherwise they may be ordinary ids).
        first_ts = self._first_timestamp if settled_text is not None else None
        text_at = [i for i, t in enumerate(tokens) if t not in self._not_text
                   and (first_ts is None or t < first_ts)][:limit]
        probs = [math.exp(logps[i]) for i in text_at]
        if row.request.decoding.word_timestamps:
            row.extra["align"] = ([tokens[i] for i in text_at], probs)
        conf = None
        if probs:
            # The mean, accumulated left to right as the word pass does: a product would rank
            # long transcripts below short ones.
            total = 0.0
            for p in probs:
                total += p
            conf = total / len(probs)
        # Whisper's avg_logprob: the mean over the generated tokens (end of text excluded).
        avg_logprob = sum(logps) / len(logps) if logps else None
        no_speech = row.extra.get("no_speech")
        guess = row.extra.get("language_guess")
        return RequestOutput(
            request_id=row.request.request_id, text=text, token_ids=tokens,
            finish_reason=finish_reason, language=row.extra.get("language"), confidence=conf,
            avg_logprob=avg_logprob, segments=segments, resume_at=resume,
            no_speech_prob=None if no_speech is None else float(no_speech),
            settled_token_ids=settled_ids,
            language_probability=None if guess is None else guess.probability,
            all_language_probs=None if guess is None else list(guess.ranked),
            metadata=row.request.metadata,
        )
