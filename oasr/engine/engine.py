"""``ASREngine``: the offline executor's tick loop.

Request -> InputProcessor (features) -> Scheduler (BatchingPolicy + PartitionPolicy)
-> ModelRunner (encoder) -> OutputProcessor (DecodeStrategy + detokenizer) -> RequestOutput.

A tick admits one scheduled batch (encode + prefill per micro-batch) when decode slots are
free, then advances the pending decode groups within a ``StepBudget``. A tick that spent its
whole decode budget does not also admit on the next, bounded by ``_MAX_SKIPPED_ADMITS`` so
admission cannot starve. One-shot families (CTC, transducers) run pipelined ticks instead:
search the micro-batch encoded last tick, queue the next encoder, then build the searched
outputs while the device runs it.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from oasr.engine.batching import build_batching_policy, build_partition_policy
from oasr.engine.config import EngineConfig
from oasr.engine.decode import build_decode_strategy
from oasr.engine.decode.registry import family_defaults
from oasr.engine.input_processor import InputProcessor
from oasr.engine.model_runner import ModelRunner
from oasr.engine.request import Request, RequestOutput
from oasr.engine.step_budget import StepBudget
from oasr.models.loader import LoadedModel

_MAX_SKIPPED_ADMITS = 4
_END = object()  # the request source ran out


class Scheduler:
    """The waiting queue, a batching policy choosing what runs next and a partition policy."""

    def __init__(self, config: EngineConfig, cost: Any) -> None:
        self.config = config
        self.waiting: list[Request] = []
        self._arrival: dict[int, float] = {}
        self.batching = build_batching_policy(config.schedule_policy, cost=cost,
                                              max_pad_ratio=config.max_offline_pad_ratio)
        self.partition = build_partition_policy(config.partition_policy, cost=cost,
                                                max_batch_size=config.max_batch_size,
                                                max_batch_frames=config.max_batch_frames)

    def add(self, request: Request) -> None:
        self.waiting.append(request)
        self._arrival[id(request)] = time.perf_counter()

    def oldest_wait_ms(self) -> float:
        if not self.waiting:
            return 0.0
        return (time.perf_counter() - self._arrival[id(self.waiting[0])]) * 1000.0

    def schedule(self, max_rows: int) -> list[list[Request]]:
        chosen = self.batching.select(self.waiting, min(max_rows, self.config.max_batch_size))
        for r in chosen:
            self._arrival.pop(id(r), None)
        return self.partition.partition(chosen) if chosen else []


def _quantize(model: Any, requested: Any, loaded: LoadedModel, device: str) -> Any:
    """Apply the checkpoint's quantization, else ``EngineConfig.quantization`` (on the model
    already on its device and dtype); the report, or None for a float model."""
    from oasr.quantization.apply import apply_quantization
    from oasr.quantization.checkpoint import engine_quantization

    spec, smoothing = engine_quantization(requested, getattr(loaded, "quantization", None))
    return apply_quantization(model, spec, device, smoothing=smoothing)


class ASREngine:
    """Offline speech recognition over a stream of requests."""

    def __init__(self, config: EngineConfig, loaded: LoadedModel | None = None) -> None:
        config.validate()
        device = config.resolve_device()
        if loaded is None:
            from oasr.models.loader import load_pretrained

            loaded = load_pretrained(config.model or None, device=device)
        self.config = config
        self.loaded = loaded
        dtype = config.resolve_dtype(device)
        self.runner = ModelRunner(loaded.model, device, dtype)
        self.model = self.runner.model
        self.quantization = _quantize(self.model, config.quantization, loaded, device)
        self.tokenizer = loaded.tokenizer
        self.inputs = InputProcessor(loaded.feature_config, device)
        self.decode_method = config.decode_method or self.model.default_decode_type
        self.strategy = build_decode_strategy(
            self.decode_method, self.model,
            family_defaults(self.decode_method, loaded.decoding_defaults, config.decode_options),
            tokenizer=self.tokenizer, engine_config=config, feature_config=loaded.feature_config,
        )
        self.scheduler = Scheduler(config, self.inputs.cost)
        self._skipped_admits = 0
        self._budget_spent = False
        self._ready: list[RequestOutput] = []
        # One-shot families, pipelined (EngineConfig.overlap_output_building): micro-batches
        # scheduled and not yet encoded, and the one whose encoder is queued on the device
        # and not yet searched.
        self._scheduled: deque[list[Request]] = deque()
        self._encoded: tuple[list[Request], Any, Any] | None = None

    @property
    def sample_rate(self) -> int:
        return self.inputs.sample_rate

    # -- admission ------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Validate at admission (raises ``ValueError`` naming the problem) and queue."""
        self.inputs.check(request)
        self.strategy.validate_options(request.decoding)
        self.scheduler.add(request)

    def has_unfinished(self) -> bool:
        return (bool(self.scheduler.waiting) or self.strategy.has_pending() or bool(self._ready)
                or bool(self._scheduled) or self._encoded is not None)

    def _should_admit(self) -> bool:
        waiting = self.scheduler.waiting
        if not waiting:
            return False
        if self._admit_room() <= 0:  # slots, or the decoder-KV budget: the rows wait
            return False
        pending = self.strategy.has_pending()
        if not pending:
            return True
        if self._budget_spent and self._skipped_admits < _MAX_SKIPPED_ADMITS:
            self._skipped_admits += 1
            return False
        window = self.config.decode_admit_window_ms
        if (window > 0 and len(waiting) < self.config.max_batch_size
                and self.scheduler.oldest_wait_ms() < window):
            return False
        return True

    def _admit_room(self) -> int:
        """Requests admissible now: free decode slots, bounded by the strategy's KV budget."""
        free = self.config.max_decode_slots - self.strategy.active_rows
        limit = self.strategy.admit_limit()
        return free if limit is None else min(free, limit)

    @torch.inference_mode()
    def _admit(self) -> None:
        free = self._admit_room()
        for micro in self.scheduler.schedule(free):
            feats, lens = self.inputs(micro)
            # enc: hidden states or (consumes == "log_probs") CTC log-probs; enc_lens is None
            # for an encoder that reads a fixed window whole (Whisper).
            enc, enc_lens = self.runner.forward(feats, lens, self.strategy.consumes)
            if self.strategy.incremental:
                self.strategy.begin_offline(micro, enc, enc_lens)
            else:
                self._ready += self.strategy.decode_offline(enc, enc_lens, micro)
        self._skipped_admits = 0

    @property
    def _pipelined(self) -> bool:
        return not self.strategy.incremental and self.config.overlap_output_building

    def _pipeline_tick(self) -> list[RequestOutput]:
        """A one-shot tick: search the micro-batch whose encoder was queued last tick, queue
        the next micro-batch's encoder, then build the searched batch's outputs. The device
        runs that encoder while this thread builds the outputs and the caller takes them
        (a transcriber assembling rows, reading the manifest, cutting the next windows); it
        waits on the host only for the search's reads and the next batch's staging."""
        built = None
        if self._encoded is not None:
            (micro, enc, enc_lens), self._encoded = self._encoded, None
            built = self.strategy.search_offline(enc, enc_lens, micro)
        room = self._admit_room()
        if not self._scheduled and self.scheduler.waiting and room > 0:
            self._scheduled.extend(self.scheduler.schedule(room))
        if self._scheduled:
            micro = self._scheduled.popleft()
            feats, lens = self.inputs(micro)
            self._encoded = (micro, *self.runner.forward(feats, lens, self.strategy.consumes))
        if built is not None:
            self._ready += built()
        out, self._ready = self._ready, []
        return out

    # -- the tick -------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        """One tick: maybe admit a batch, then advance decoding within the budget."""
        with self._sdpa_backends():
            if self._pipelined:
                return self._pipeline_tick()
            if self._should_admit():
                self._admit()
            out, self._ready = self._ready, []
            if self.strategy.incremental and self.strategy.has_pending():
                budget = StepBudget.for_tick(self.config.decode_steps_per_tick,
                                             self.config.max_tick_ms)
                out += self.strategy.advance(budget)
                self._budget_spent = budget.taken >= budget.max_steps
        return out

    def _sdpa_backends(self) -> Any:
        """SDPA without cuDNN's backend on CUDA: on the H200 it spent ~2.5 ms of host time per
        call building plans for each new shape (55% of a batch-64 run's CPU time, the GPU idle),
        where flash / memory-efficient attention launch in microseconds."""
        if self.runner.device.type != "cuda" or not self.config.avoid_cudnn_sdpa:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                            SDPBackend.MATH])

    def run(self, requests: Iterable[Request | None], lookahead: int | None = None
            ) -> Iterator[RequestOutput]:
        """Decode ``requests`` (consumed lazily), yielding outputs as they finish: the one
        admission loop, for a list of requests as for ``oasr transcribe``'s windows.

        The source may yield ``None`` for "nothing to add now" (its next request depends on an
        output still being decoded): the engine steps, yields what finished, and asks again.
        A request refused at admission comes back as an output with ``error`` set.

        Raises:
            RuntimeError: the source yielded ``None`` while nothing was being decoded (it would
                wait forever).
        """
        lookahead = lookahead or 4 * self.config.max_batch_size
        it = iter(requests)
        exhausted = False
        while True:
            idle = False
            while not exhausted and len(self.scheduler.waiting) < lookahead:
                req = next(it, _END)
                if req is _END:
                    exhausted = True
                    break
                if req is None:
                    idle = True
                    break
                try:
                    self.add_request(req)
                except ValueError as exc:
                    yield RequestOutput(req.request_id, error=str(exc), metadata=req.metadata)
            if not self.has_unfinished():
                if exhausted:
                    return
                if idle:
                    raise RuntimeError("the request source waits on outputs, but no request "
                                       "is being decoded")
                continue
            yield from self.step()
