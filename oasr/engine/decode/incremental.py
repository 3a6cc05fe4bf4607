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
from oasr.engine.decode.sampling import RowSampling, select_next_tokens
from oasr.engine.decoder_graph import DecoderStepGraphs
from oasr.engine.request import Request, RequestOutput
from oasr.engine.step_budget import StepBudget


@dataclass
class ArRow:
    """Host-side bookkeeping of one request in a decode group."""

    request: Request
    max_new: int
    sampling: RowSampling | None = None
    extra: dict[str, Any] = field(default_factory=dict)


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
        return GreedyGroup(
            self.rows + other.rows, self.state.merge(other.state),
            torch.cat([self.last, other.last]), torch.cat([self.out, other.out]),
            torch.cat([self.logp, other.logp]), torch.cat([self.ngen, other.ngen]),
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
        if self.kv_budget is None:
            return None
        rows = self.kv_budget.admit_limit(self.held_rows)
        return None if rows is None else rows // self.rows_per_request

    def decoder_step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        """One decoder step, replayed from a CUDA graph when the state's shape allows."""
        if self.step_graphs is not None:
            return self.step_graphs.step(self.model.decoder, tokens, state)
        return self.model.decoder.step(tokens, state)

    # -- the protocol ---------------------------------------------------------------------
    def begin_offline(self, requests: list[Request], enc: torch.Tensor,
                      enc_lens: torch.Tensor | None) -> None:
        logits, state, rows = self.prefill_rows(requests, enc, enc_lens)
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
        self._emit(group, logits, first=True)
        self._absorb(group)

    def advance(self, budget: StepBudget) -> list[RequestOutput]:
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
        return bool(self.groups) or bool(self._finished)

    @property
    def active_rows(self) -> int:
        return sum(g.live for g in self.groups)

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
        for j, i in enumerate(finished):
            n = ngen[i]
            tokens, logps = toks[j][:n], lps[j][:n]
            if i in reasons:
                period, copies = trailing_repeats(tokens)
                cut = n - (copies - 1) * period
                tokens, logps = tokens[:cut], logps[:cut]
                reason = "repetition"
            elif tokens and tokens[-1] in (self.stop_ids or (self.eos_id,)):
                tokens, logps = tokens[:-1], logps[:-1]
                reason = "stop"
            else:
                reason = "length"
            outs.append(self.finish_row(g.rows[i], tokens, logps, reason))
            g.emitted[i] = True
        self.after_finish(g, finished, outs)
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
