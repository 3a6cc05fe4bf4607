"""``IncrementalArStrategy``: the label-synchronous AR protocol shared by AR families.

The offline executor prefills a micro-batch (``begin_offline``); the strategy parks its rows
in a decode group and advances every group within a ``StepBudget`` per tick (``advance``),
retiring finished rows by index selection. A new group is absorbed into one already
generating when the state says the two can merge: an AR step is weight-read bound, so two
groups cost about twice one group of the same rows.

Tokens, their log-probabilities and the end flags stay on the device; the host reads the flags
every ``eos_check_interval`` steps, so a greedy step adds no synchronisation (what does sync:
that read, compaction, a capture of a new step-graph shape, and per step a timestamp-mode
row; a sampled row draws on the device, ``sampling.py``). A family implements
``prefill_rows`` (prompt + state), ``process_logits`` (suppression), ``eos_id`` and
``finish_row`` (detokenize).

A row may start with forced tokens (``ArRow.forced``: Whisper's prefix), written as already
generated. A family that ``serves_best_of`` decodes a sampled request with ``best_of > 1`` as
that many candidate rows and keeps the best (``candidates.py``).

Decoder KV storage (``setup_decoder_kv``): ``dense`` or ``paged`` on the engine's one
``BlockPool`` (``oasr.cache.kv_budget``), admission bounded by ``decode_kv_budget_gib``
(``admit_limit``), and, on CUDA over paged storage, steps replayed from CUDA graphs
(``oasr/engine/decoder_graph.py``). A retiring row's storage is released at once
(``state.release_rows``): paged blocks go back to the pool before the group compacts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from oasr.cache.kv_budget import DecoderKvBudget, resolve_kv_storage
from oasr.engine.config import EngineConfig
from oasr.engine.decode.base import DecodeStrategy
from oasr.engine.decode.candidates import CandidateSet
from oasr.engine.decode.sampling import RowSampling, select_next_tokens
from oasr.engine.decoder_graph import DecoderStepGraphs
from oasr.engine.request import Request, RequestOutput
from oasr.engine.step_budget import StepBudget


@dataclass
class ArRow:
    """Host-side bookkeeping of one request in a decode group."""

    request: Request
    max_new: int  # tokens the row may hold, its forced ones included
    sampling: RowSampling | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The transcript's first tokens, forced (Whisper's prefix), and the model's log-probability
    # of each; the row starts with them as generated.
    forced: list[int] = field(default_factory=list)
    forced_logps: list[float] = field(default_factory=list)


@dataclass
class GreedyGroup:
    """Rows decoding together. Device tensors are row-aligned with ``rows``."""

    rows: list[ArRow]
    state: Any
    last: torch.Tensor  # (B,) the token each row feeds next
    out: torch.Tensor  # (B, cap) generated tokens
    logp: torch.Tensor  # (B, cap) log-probability of each generated token
    ngen: torch.Tensor  # (B,) tokens generated
    done: torch.Tensor  # (B,) bool
    max_new: torch.Tensor  # (B,)
    since_check: int = 0
    # Rows whose output has gone out; they idle (feeding EOS) until the group is compacted.
    emitted: list[bool] = field(default_factory=list)
    # The family's per-row logit rules as device tensors, built on first use; a selected or
    # merged group builds its own.
    rules: Any = None

    def __post_init__(self) -> None:
        if not self.emitted:
            self.emitted = [False] * len(self.rows)

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def live(self) -> int:
        return self.size - sum(self.emitted)

    def select(self, idx: list[int], decoder: Any) -> GreedyGroup:
        t = torch.tensor(idx, device=self.last.device)
        return GreedyGroup(
            [self.rows[i] for i in idx], decoder.select(self.state, t),
            self.last[t], self.out[t], self.logp[t], self.ngen[t], self.done[t],
            self.max_new[t], self.since_check, [self.emitted[i] for i in idx],
        )

    def merge(self, other: GreedyGroup) -> GreedyGroup:
        # Token buffers widen to the wider group's (rows with forced tokens hold more).
        width = max(self.out.shape[1], other.out.shape[1])

        def cat(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]))
                              for t in (a, b)])

        return GreedyGroup(
            self.rows + other.rows, self.state.merge(other.state),
            torch.cat([self.last, other.last]), cat(self.out, other.out),
            cat(self.logp, other.logp), torch.cat([self.ngen, other.ngen]),
            torch.cat([self.done, other.done]), torch.cat([self.max_new, other.max_new]),
            min(self.since_check, other.since_check), self.emitted + other.emitted,
        )


def trailing_repeats(tokens: list[int], max_period: int = 16) -> tuple[int, int]:
    """(period, copies) of the most repeated trailing n-gram of ``tokens``."""
    best = (0, 0)
    n = len(tokens)
    for p in range(1, min(max_period, n // 2) + 1):
        copies = 1
        tail = tokens[n - p:]
        while (copies + 1) * p <= n and tokens[n - (copies + 1) * p:n - copies * p] == tail:
            copies += 1
        if copies > 1 and copies * p > best[0] * best[1]:
            best = (p, copies)
    return best


CUDA_EOS_CHECK_INTERVAL = 8


@runtime_checkable
class IncrementalArOptions(Protocol):
    """The knobs every incremental family's options dataclass declares (``AedOptions``)."""

    eos_check_interval: int  # host reads of the end flags every n steps; 0: by device
    merge_groups: bool
    repetition_guard: int  # 0: off
    compact_fraction: float
    use_step_graphs: bool
    step_graph_max_captures: int


class IncrementalArStrategy(DecodeStrategy):
    """Group bookkeeping, the budget loop and row retirement for label-synchronous AR."""

    incremental: ClassVar[bool] = True
    consumes = "hidden"
    # Whether a sampled request's best_of > 1 is decoded as candidates (else refused).
    serves_best_of: ClassVar[bool] = False

    options: IncrementalArOptions

    def __init__(self, model: Any, options: Any = None, **kwargs: Any) -> None:
        if not isinstance(options, IncrementalArOptions):
            missing = [n for n in IncrementalArOptions.__annotations__
                       if not hasattr(options, n)]
            raise TypeError(f"{type(self).__name__}: its options ({type(options).__name__}) "
                            f"lack the incremental-family knobs {missing}")
        super().__init__(model, options, **kwargs)
        self.groups: list[Any] = []
        self._finished: list[RequestOutput] = []
        self._turn = 0
        self.kv_storage = "dense"
        self.kv_budget: DecoderKvBudget | None = None
        self.step_graphs: DecoderStepGraphs | None = None
        self.eos_check_interval = self._resolve_eos_check_interval()
        self._stop_on: dict[torch.device, torch.Tensor] = {}
        # best_of: candidate copies awaiting their prefill -> (set, index), and the sets whose
        # candidates wait for KV room.
        self._candidate_of: dict[int, tuple[CandidateSet, int]] = {}
        self._waiting_sets: list[CandidateSet] = []

    # -- family hooks ---------------------------------------------------------------------
    eos_id: int = -1  # what a finished row feeds until compaction
    # Every id that ends a row (an LLM ends a turn on several); empty: ``(eos_id,)``.
    stop_ids: tuple[int, ...] = ()

    def prefill_rows(self, requests: list[Request], enc: torch.Tensor,
                     enc_lens: torch.Tensor | None) -> tuple[torch.Tensor, Any, list[ArRow]]:
        raise NotImplementedError

    def process_logits(self, logits: torch.Tensor, first: bool,
                       group: GreedyGroup | None = None) -> torch.Tensor:
        return logits

    def finish_row(self, row: ArRow, tokens: list[int], logps: list[float],
                   finish_reason: str) -> RequestOutput:
        raise NotImplementedError

    def after_finish(self, group: GreedyGroup, indices: list[int],
                     outputs: list[RequestOutput]) -> None:
        """Called with the rows finishing now while their state is still in ``group``."""

    @property
    def default_length_penalty(self) -> float:
        """The ranking exponent of best_of candidates when a request sets none."""
        return 1.0

    def validate_options(self, decoding: Any) -> None:
        super().validate_options(decoding)
        if decoding.sampling and decoding.best_of > 1 and not self.serves_best_of:
            raise ValueError(f"decode family {self.name!r} samples one candidate per request; "
                             "best_of > 1 is not served: set best_of=1")

    # -- options shared by incremental families -------------------------------------------
    def _resolve_eos_check_interval(self) -> int:
        n = self.options.eos_check_interval
        if n > 0:
            return n
        # 0: by device. A finished row idles (feeding EOS) until the next check: cheap on a GPU,
        # where each host read stalls the launch queue; on a CPU the step itself dominates.
        param = next(self.model.decoder.parameters(), None)
        return CUDA_EOS_CHECK_INTERVAL if param is not None and param.is_cuda else 1

    @property
    def merge_groups(self) -> bool:
        return self.options.merge_groups

    @property
    def repetition_guard(self) -> int:
        return self.options.repetition_guard

    @property
    def compact_fraction(self) -> float:
        return self.options.compact_fraction

    # -- decoder KV storage, admission budget and step graphs -----------------------------
    def setup_decoder_kv(self, row_positions: int, greedy: bool) -> None:
        """Resolve ``EngineConfig.kv_storage``, build the KV budget (and, paged, the pool) and
        the step-graph cache. ``row_positions``: self-attention positions a row may reserve;
        ``greedy``: False for beam search, which stays dense.

        Graphs run when the model is on CUDA, the family's ``use_step_graphs`` is on and the
        decoder declares ``supports_step_graphs``; they capture only paged states.
        """
        decoder = self.model.decoder
        cfg = self.engine_config if self.engine_config is not None else EngineConfig()
        param = next(decoder.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
        dtype = param.dtype if param is not None else torch.float32
        cuda = device.type == "cuda"
        graphs = (greedy and cuda and self.options.use_step_graphs
                  and decoder.supports_step_graphs)
        storage = resolve_kv_storage(cfg.kv_storage, cuda=cuda, greedy=greedy, graphs=graphs)
        spec = decoder.cache_spec
        if storage == "paged" and spec is None:
            raise ValueError(f"kv_storage='paged': {type(decoder).__name__} declares no "
                             "cache_spec, so its KV cannot be paged")
        budget = float(cfg.decode_kv_budget_gib)
        self.kv_storage = storage
        if spec is not None and (storage == "paged" or budget > 0):
            self.kv_budget = DecoderKvBudget(
                spec, storage, row_positions, budget_gib=budget,
                block_size=cfg.kv_block_size, max_rows=cfg.max_decode_slots, device=device,
                dtype=dtype,
            )
        if graphs and storage == "paged":
            self.step_graphs = DecoderStepGraphs(self.options.step_graph_max_captures)

    @property
    def kv_pool(self) -> Any:
        """The ``BlockPool`` greedy groups page on, or ``None`` for dense storage."""
        if self.kv_storage != "paged" or self.kv_budget is None:
            return None
        return self.kv_budget.pool

    @property
    def held_rows(self) -> int:
        """Rows whose KV the decode groups hold (finished rows idle until compaction)."""
        return sum(g.size for g in self.groups)

    @property
    def rows_per_request(self) -> int:
        return 1

    def admit_limit(self) -> int | None:
        rows = self._row_room()
        if rows is None:
            return None
        # Waiting candidates are owed the room first.
        return max(0, rows - self._waiting_rows) // self.rows_per_request

    def _row_room(self) -> int | None:
        """Rows the decoder-KV budget can take now (``None``: no limit)."""
        if self.kv_budget is None:
            return None
        return self.kv_budget.admit_limit(self.held_rows)

    @property
    def _waiting_rows(self) -> int:
        return sum(len(cs.waiting) for cs in self._waiting_sets)

    def decoder_step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        """One decoder step, replayed from a CUDA graph when the state's shape allows."""
        if self.step_graphs is not None:
            return self.step_graphs.step(self.model.decoder, tokens, state)
        return self.model.decoder.step(tokens, state)

    # -- the protocol ---------------------------------------------------------------------
    def begin_offline(self, requests: list[Request], enc: torch.Tensor,
                      enc_lens: torch.Tensor | None) -> None:
        requests, enc, enc_lens = self._expand_candidates(requests, enc, enc_lens)
        logits, state, rows = self.prefill_rows(requests, enc, enc_lens)
        for row in rows:
            entry = self._candidate_of.pop(id(row.request), None)
            if entry is not None:
                row.extra["candidate"] = entry
                if entry[0].language is None:
                    entry[0].language = row.extra.get("language")
        dev = logits.device
        b = len(rows)
        cap = max(r.max_new for r in rows)
        if self.engine_config is not None:
            cap = max(cap, self.engine_config.max_new_tokens)
        group = GreedyGroup(
            rows, state,
            last=torch.zeros(b, dtype=torch.long, device=dev),
            out=torch.zeros(b, cap, dtype=torch.long, device=dev),
            logp=torch.zeros(b, cap, dtype=torch.float32, device=dev),
            ngen=torch.zeros(b, dtype=torch.long, device=dev),
            done=torch.zeros(b, dtype=torch.bool, device=dev),
            max_new=torch.tensor([r.max_new for r in rows], device=dev),
        )
        width = max(len(r.forced) for r in rows)
        if width:  # forced tokens stand as generated: one copy per prefill
            toks = [r.forced + [self.eos_id] * (width - len(r.forced)) for r in rows]
            lps = [r.forced_logps + [0.0] * (width - len(r.forced)) for r in rows]
            group.out[:, :width] = torch.tensor(toks, device=dev)
            group.logp[:, :width] = torch.tensor(lps, dtype=torch.float32, device=dev)
            group.ngen.copy_(torch.tensor([len(r.forced) for r in rows], device=dev))
        self._emit(group, logits, first=True)
        self._absorb(group)

    # -- best_of candidates ---------------------------------------------------------------
    def _expand_candidates(self, requests: list[Request], enc: torch.Tensor,
                           enc_lens: torch.Tensor | None
                           ) -> tuple[list[Request], torch.Tensor, torch.Tensor | None]:
        """Each sampled request with ``best_of = n > 1`` becomes candidate copies: as many as
        the KV budget has room for now (every request keeps at least one), the rest wait."""
        wants = [r.decoding.best_of if r.decoding.sampling else 1 for r in requests]
        if max(wants) <= 1:
            return requests, enc, enc_lens
        room = self._row_room()
        spare = None if room is None else max(0, room - len(requests))
        out: list[Request] = []
        rows: list[int] = []
        for i, (r, n) in enumerate(zip(requests, wants)):
            if n <= 1:
                out.append(r)
                rows.append(i)
                continue
            lp = r.decoding.length_penalty
            cs = CandidateSet(r, n, self.default_length_penalty if lp is None else lp)
            start = n if spare is None else 1 + min(n - 1, spare)
            if spare is not None:
                spare -= start - 1
            for c in range(start):
                copy = cs.copy(c)
                self._candidate_of[id(copy)] = (cs, c)
                out.append(copy)
                rows.append(i)
            cs.waiting = list(range(start, n))
            if cs.waiting:
                cs.enc = enc[i:i + 1].clone()
                cs.enc_lens = None if enc_lens is None else enc_lens[i:i + 1].clone()
                self._waiting_sets.append(cs)
        idx = torch.tensor(rows, device=enc.device)
        return (out, enc.index_select(0, idx),
                None if enc_lens is None else enc_lens.index_select(0, idx))

    def _start_waiting(self) -> None:
        """Prefill waiting candidates as far as the KV room allows (the family's
        ``begin_offline``, one prefill per request)."""
        while self._waiting_sets:
            cs = self._waiting_sets[0]
            room = self._row_room()
            take = len(cs.waiting) if room is None else min(room, len(cs.waiting))
            if take <= 0:
                return
            idx, cs.waiting = cs.waiting[:take], cs.waiting[take:]
            enc = cs.enc.expand(take, *cs.enc.shape[1:]).contiguous()
            lens = None if cs.enc_lens is None else cs.enc_lens.expand(take).contiguous()
            if not cs.waiting:
                self._waiting_sets.pop(0)
                cs.enc = cs.enc_lens = None
            copies = []
            for c in idx:
                copy = cs.copy(c)
                self._candidate_of[id(copy)] = (cs, c)
                copies.append(copy)
            self.begin_offline(copies, enc, lens)

    def _settle(self, row: ArRow, out: RequestOutput, logp_sum: float
                ) -> tuple[RequestOutput, ArRow] | None:
        """A finished row's output to emit (a candidate's: its set's winner, once all are
        in; ``None`` until then)."""
        entry = row.extra.get("candidate")
        if entry is None:
            return out, row
        cs, index = entry
        return cs.add(cs.score(logp_sum, len(out.token_ids)), index, out, row)

    def advance(self, budget: StepBudget) -> list[RequestOutput]:
        if self._waiting_sets:
            self._start_waiting()
        while self.groups and budget.take():
            self._turn = (self._turn + 1) % len(self.groups)
            g = self.groups[self._turn]
            logits = self.decoder_step(g.last, g.state)
            self._emit(g, logits, first=False)
            g.since_check += 1
            if g.since_check >= self.eos_check_interval:
                self._retire(self._turn)
        out, self._finished = self._finished, []
        return out

    def has_pending(self) -> bool:
        return bool(self.groups) or bool(self._finished) or bool(self._waiting_sets)

    @property
    def active_rows(self) -> int:
        return sum(g.live for g in self.groups) + self._waiting_rows

    # -- internals ------------------------------------------------------------------------
    def _emit(self, g: GreedyGroup, logits: torch.Tensor, first: bool) -> None:
        logits = self.process_logits(logits.float(), first, g)
        sampling = {i: r.sampling for i, r in enumerate(g.rows) if r.sampling is not None}
        tok = select_next_tokens(logits, sampling)
        tok = torch.where(g.done, torch.full_like(tok, self.eos_id), tok)
        lp = torch.log_softmax(logits, dim=-1).gather(1, tok[:, None])[:, 0]
        col = g.ngen.clamp(max=g.out.shape[1] - 1)[:, None]
        live = ~g.done
        g.out.scatter_(1, col, torch.where(live, tok, g.out.gather(1, col)[:, 0])[:, None])
        g.logp.scatter_(1, col, torch.where(live, lp, g.logp.gather(1, col)[:, 0])[:, None])
        g.ngen += live.long()
        g.done |= self._is_stop(tok) | (g.ngen >= g.max_new)
        g.last = tok

    def _is_stop(self, tok: torch.Tensor) -> torch.Tensor:
        stops = self.stop_ids
        if len(stops) <= 1:
            return tok == (stops[0] if stops else self.eos_id)
        ids = self._stop_on.get(tok.device)
        if ids is None:
            ids = torch.tensor(stops, device=tok.device)  # once per device: no per-step copy
            self._stop_on[tok.device] = ids
        return torch.isin(tok, ids)

    def _absorb(self, group: GreedyGroup) -> None:
        if self.merge_groups:
            for i, g in enumerate(self.groups):
                if g.state.can_merge(group.state):
                    self.groups[i] = g.merge(group)
                    self._retire(i)
                    return
        self.groups.append(group)
        self._retire(len(self.groups) - 1)

    def _retire(self, gi: int) -> None:
        """Emit the rows that finished; compact the group once enough of it idles.

        Compacting copies every row's KV (the cross half is the whole encoder window), so a
        finished row idles, feeding EOS, until ``compact_fraction`` of the group has finished.
        """
        g = self.groups[gi]
        g.since_check = 0
        done = g.done.tolist()
        guard = self.repetition_guard
        reasons: dict[int, str] = {}
        if guard:
            ngen = g.ngen.tolist()
            for i, d in enumerate(done):
                if not d and ngen[i] >= 2 * guard:
                    period, copies = trailing_repeats(g.out[i, :ngen[i]].tolist())
                    if copies >= guard and period * copies >= 2 * guard:
                        done[i] = True
                        reasons[i] = "repetition"
        finished = [i for i, d in enumerate(done) if d and not g.emitted[i]]
        if not finished:
            return
        if reasons:
            g.done[torch.tensor(sorted(reasons), device=g.done.device)] = True
        ngen = g.ngen.tolist()
        toks = g.out[finished].tolist()
        lps = g.logp[finished].tolist()
        outs: list[RequestOutput] = []
        emitted: list[int] = []
        for j, i in enumerate(finished):
            n = ngen[i]
            tokens, logps = toks[j][:n], lps[j][:n]
            ended = 0.0  # the end of text's log-probability (a candidate's score counts it)
            if i in reasons:
                period, copies = trailing_repeats(tokens)
                cut = n - (copies - 1) * period
                tokens, logps = tokens[:cut], logps[:cut]
                reason = "repetition"
            elif tokens and tokens[-1] in (self.stop_ids or (self.eos_id,)):
                ended = logps[-1]
                tokens, logps = tokens[:-1], logps[:-1]
                reason = "stop"
            else:
                reason = "length"
            g.emitted[i] = True
            row = g.rows[i]
            settled = self._settle(row, self.finish_row(row, tokens, logps, reason),
                                   sum(logps) + ended)
            if settled is None:
                continue
            out, winner = settled
            if winner is not row:
                # The winner's row may be gone: this row (the same request's encoder output)
                # serves what after_finish reads of it.
                row.extra.pop("align", None)
                if "align" in winner.extra:
                    row.extra["align"] = winner.extra["align"]
            outs.append(out)
            emitted.append(i)
        self.after_finish(g, emitted, outs)
        self._finished += outs
        g.state.release_rows(finished)  # paged: the blocks are free for admission now
        live = [i for i, e in enumerate(g.emitted) if not e]
        if not live:
            del self.groups[gi]
        elif len(live) <= (1.0 - self.compact_fraction) * g.size:
            # Swap-remove: live rows from the tail fill the holes, so only they move.
            n = len(live)
            tail = iter(i for i in live if i >= n)
            order = [next(tail) if g.emitted[p] else p for p in range(n)]
            self.groups[gi] = g.select(order, self.model.decoder)
