"""Decoder-step CUDA graphs (``oasr/engine/decoder_graph.py``).

On a CPU, capture is replaced by ``tests/helpers/fake_graphs.FakeCapture`` (same contract: a
replay recomputes the step from the static inputs into the same output tensors), so the keys,
the capture budget, remembered failures, the out-of-memory switch and the copy-in / copy-out
plumbing are checked against the eager step. The ``gpu`` tests capture for real and require
replay to be bit-identical to the eager step, and a greedy step to make no host sync.

Oracle: the eager ``decoder.step`` on an identical paged state in the same pool.
"""

from __future__ import annotations

import logging

import pytest
import torch

from oasr.cache.paged import BlockPool
from oasr.engine.config import EngineConfig
from oasr.engine.decoder_graph import DecoderStepGraphs
from oasr.engine.engine import ASREngine
from oasr.engine.request import Request
from oasr.engine.step_budget import StepBudget
from oasr.models.whisper.model import WhisperDecoder
from tests.helpers.fake_graphs import FakeCapture
from tests.helpers.tiny_whisper import (
    build_tiny_whisper,
    random_audio,
    tiny_whisper_config,
    torch_threads,
)

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def _decoder(head_dim: int = 16, heads: int = 2, device: str = "cpu",
             dtype: torch.dtype = torch.float32, seed: int = 0) -> WhisperDecoder:
    cfg = tiny_whisper_config()
    cfg.d_model = heads * head_dim
    cfg.decoder_attention_heads = heads
    torch.manual_seed(seed)
    dec = WhisperDecoder(cfg)
    with torch.no_grad():
        for name, p in dec.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
    return dec.to(device=device, dtype=dtype).eval()


def _pair(dec: WhisperDecoder, rows: int, block_size: int, cap: int = 40, t_enc: int = 20,
          seed: int = 0):
    """Two identical paged states (eager, graphed) on one pool, and the first tokens."""
    spec = dec.cache_spec
    p = next(dec.parameters())
    pool = BlockPool(spec.layers, 8 * rows * (cap + t_enc) // block_size + 16, block_size,
                     spec.kv_heads, spec.head_dim, p.device, p.dtype)
    gen = torch.Generator().manual_seed(seed)
    enc = torch.randn(rows, t_enc, dec.cfg.d_model, generator=gen).to(p.device, p.dtype)
    prompt = torch.tensor([dec.cfg.sot_sequence] * rows, device=p.device)
    la, a = dec.prefill(enc, prompt, cap, pool=pool)
    lb, b = dec.prefill(enc, prompt, cap, pool=pool)
    assert torch.equal(la, lb)
    return pool, a, b, la.argmax(-1)


def _drive(dec, graphs, eager, graphed, tok, steps: int):
    """Step both states, asserting the replayed step equals the eager one exactly."""
    for _ in range(steps):
        want = dec.step(tok, eager)
        got = graphs.step(dec, tok, graphed)
        assert torch.equal(got, want)
        assert torch.equal(graphed.kv.lens, eager.kv.lens)
        assert graphed.kv.max_len == eager.kv.max_len
        tok = want.argmax(-1)
    return tok


# -- CPU: keys, budget, failures (capture mocked) -----------------------------------------------


@torch.inference_mode()
def test_replay_plumbing_equals_eager_and_keys_are_rows_by_bucketed_width():
    dec = _decoder()
    _, a, b, tok = _pair(dec, rows=3, block_size=4)
    cap = FakeCapture()
    graphs = DecoderStepGraphs(capture=cap)
    _drive(dec, graphs, a, b, tok, steps=35)
    # max_len runs 2 -> 37: the step reads 1..10 blocks of 4, bucketed to powers of two and
    # capped at the table's 10.
    assert {k[1] for k in graphs.graphs} == {1, 2, 4, 8, 10}
    assert {k[0] for k in graphs.graphs} == {3}
    assert cap.calls == len(graphs.graphs) == 5
    assert graphs.stats["replays"] == 35 and graphs.stats["eager"] == 0


@torch.inference_mode()
def test_a_compacted_or_merged_group_is_a_new_key_and_still_exact():
    dec = _decoder()
    pool, a, b, tok = _pair(dec, rows=4, block_size=8)
    graphs = DecoderStepGraphs(capture=FakeCapture())
    tok = _drive(dec, graphs, a, b, tok, steps=6)
    idx = torch.tensor([3, 1, 2])
    a, b = a.select(idx), b.select(idx)
    tok = _drive(dec, graphs, a, b, tok[idx], steps=4)
    # Two newcomers prefilled on the same pool merge in at a shallower depth.
    enc = torch.randn(2, 20, dec.cfg.d_model, generator=torch.Generator().manual_seed(1))
    prompt = torch.tensor([dec.cfg.sot_sequence] * 2)
    lc, c = dec.prefill(enc, prompt, 40, pool=pool)
    _, d = dec.prefill(enc, prompt, 40, pool=pool)
    a, b = a.merge(c), b.merge(d)
    _drive(dec, graphs, a, b, torch.cat([tok, lc.argmax(-1)]), steps=8)
    assert {k[0] for k in graphs.graphs} == {4, 3, 5}


@torch.inference_mode()
def test_the_capture_budget_is_respected():
    dec = _decoder()
    _, a, b, tok = _pair(dec, rows=2, block_size=4)
    cap = FakeCapture()
    graphs = DecoderStepGraphs(max_captures=2, capture=cap)
    _drive(dec, graphs, a, b, tok, steps=20)  # needs widths 1, 2, 4, 8
    assert len(graphs.graphs) == 2 and cap.calls == 2
    assert graphs.stats["over_budget"] > 0 and graphs.stats["eager"] > 0
    none = DecoderStepGraphs(max_captures=0, capture=FakeCapture())
    _, a, b, tok = _pair(dec, rows=2, block_size=4)
    _drive(dec, none, a, b, tok, steps=3)
    assert not none.graphs and none.stats["eager"] == 3


@torch.inference_mode()
def test_a_failed_capture_is_remembered_not_retried(caplog):
    dec = _decoder()
    _, a, b, tok = _pair(dec, rows=2, block_size=64)  # one width for the whole decode
    cap = FakeCapture(fail=RuntimeError("operation not permitted when stream is capturing"))
    graphs = DecoderStepGraphs(capture=cap)
    with caplog.at_level(logging.WARNING, logger="oasr.engine"):
        _drive(dec, graphs, a, b, tok, steps=6)
    assert cap.calls == 1 and len(graphs.failed) == 1 and graphs.enabled
    assert graphs.stats["eager"] == 6
    assert sum("capturing" in r.getMessage() for r in caplog.records) == 1


@torch.inference_mode()
def test_out_of_memory_during_capture_turns_graphs_off_once(caplog):
    dec = _decoder()
    _, a, b, tok = _pair(dec, rows=2, block_size=4)
    cap = FakeCapture(fail=torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate"))
    graphs = DecoderStepGraphs(capture=cap)
    with caplog.at_level(logging.WARNING, logger="oasr.engine"):
        _drive(dec, graphs, a, b, tok, steps=20)  # crosses several widths
    assert not graphs.enabled and cap.calls == 1 and not graphs.failed
    assert sum("out of memory" in r.getMessage() for r in caplog.records) == 1


@torch.inference_mode()
def test_a_dense_state_runs_eager_without_capturing():
    dec = _decoder()
    enc = torch.randn(2, 20, dec.cfg.d_model)
    prompt = torch.tensor([dec.cfg.sot_sequence] * 2)
    la, a = dec.prefill(enc, prompt, 40)
    _, b = dec.prefill(enc, prompt, 40)
    cap = FakeCapture()
    graphs = DecoderStepGraphs(capture=cap)
    tok = la.argmax(-1)
    for _ in range(4):
        want = dec.step(tok, a)
        assert torch.equal(graphs.step(dec, tok, b), want)
        tok = want.argmax(-1)
    assert cap.calls == 0 and graphs.stats["eager"] == 4


def test_max_captures_must_not_be_negative():
    with pytest.raises(ValueError, match="max_captures"):
        DecoderStepGraphs(max_captures=-1)


# -- GPU: real capture --------------------------------------------------------------------------


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("head_dim", [32, 64])
@torch.inference_mode()
def test_replay_is_bit_identical_to_eager_on_cuda(head_dim, block_size, dtype):
    dec = _decoder(head_dim=head_dim, heads=4, device="cuda", dtype=dtype)
    pool, a, b, tok = _pair(dec, rows=5, block_size=block_size, cap=60, t_enc=37)
    graphs = DecoderStepGraphs()
    tok = _drive(dec, graphs, a, b, tok, steps=30)
    idx = torch.tensor([4, 1, 3], device="cuda")  # a compaction: a new row count
    a, b = a.select(idx), b.select(idx)
    _drive(dec, graphs, a, b, tok[idx], steps=25)
    assert graphs.enabled and not graphs.failed
    assert graphs.stats["replays"] == 55 and graphs.stats["eager"] == 0
    assert len({k[1] for k in graphs.graphs}) >= 2  # the width bucket moved


class _SyncingDecoder:
    """A decoder whose step reads a value back: not capturable."""

    supports_step_graphs = True

    def __init__(self, dec: WhisperDecoder) -> None:
        self.dec = dec
        self.calls = 0

    def step(self, tokens, state):
        self.calls += 1
        logits = self.dec.step(tokens, state)
        float(logits[0, 0])  # a host sync
        return logits


@pytest.mark.gpu
@gpu
@torch.inference_mode()
def test_a_shape_that_fails_to_capture_is_remembered_on_cuda():
    dec = _decoder(head_dim=32, device="cuda", dtype=torch.float16)
    _, a, b, tok = _pair(dec, rows=2, block_size=64)
    syncing = _SyncingDecoder(dec)
    graphs = DecoderStepGraphs()
    for _ in range(4):
        want = dec.step(tok, a)
        assert torch.equal(graphs.step(syncing, tok, b), want)
        tok = want.argmax(-1)
    assert len(graphs.failed) == 1 and not graphs.graphs and graphs.enabled
    # The failed capture cost a warm-up and a capture attempt, once; then one eager step each.
    assert syncing.calls == 2 + 4


@pytest.mark.gpu
@gpu
@torch.inference_mode()
def test_the_capture_budget_holds_on_cuda():
    dec = _decoder(head_dim=32, device="cuda", dtype=torch.float16)
    _, a, b, tok = _pair(dec, rows=2, block_size=16)
    graphs = DecoderStepGraphs(max_captures=1)
    _drive(dec, graphs, a, b, tok, steps=36)  # widths 1, 2, 3 (capped)
    assert len(graphs.graphs) == 1 and graphs.stats["over_budget"] > 0


def _cuda_engine(**config) -> ASREngine:
    tw = build_tiny_whisper(seed=0, with_hf=False)  # fresh: the engine moves it to the GPU
    return ASREngine(EngineConfig(device="cuda", **config), loaded=tw.loaded)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("arm", [{"kv_storage": "paged"}, {"kv_storage": "dense"},
                                 {"kv_storage": "paged", "use_step_graphs": False}])
def test_a_greedy_step_makes_no_host_sync(arm):
    options = {"eos_check_interval": 1000}
    if "use_step_graphs" in arm:
        options["use_step_graphs"] = False
    # One 64-position block: a single step shape, captured on the first tick.
    engine = _cuda_engine(kv_storage=arm["kv_storage"], kv_block_size=64, max_new_tokens=48,
                          decode_steps_per_tick=4, decode_options=options)
    for i in range(3):
        engine.add_request(Request(str(i), random_audio(i)))
    engine.step()  # admission, prefill, first steps (and the capture)
    strategy = engine.strategy
    assert strategy.groups
    before = [g.ngen.clone() for g in strategy.groups]
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.inference_mode():
            strategy.advance(StepBudget(8, float("inf")))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all((g.ngen - b).max() > 0 for g, b in zip(strategy.groups, before))
    if arm == {"kv_storage": "paged"}:
        assert strategy.step_graphs is not None and strategy.step_graphs.stats["replays"] > 0


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_graphed_engine_matches_eager_paged_token_for_token(dtype):
    audio = [random_audio(i) for i in range(9)]

    def run(**config):
        engine = _cuda_engine(dtype=dtype, max_batch_size=3, decode_steps_per_tick=3,
                              max_new_tokens=40, **config)
        outs = {o.request_id: (o.token_ids, o.finish_reason)
                for o in engine.run([Request(str(i), a) for i, a in enumerate(audio)])}
        return outs, engine.strategy

    graphed, s = run()  # auto: paged + graphs on CUDA
    assert s.kv_storage == "paged" and s.step_graphs.stats["replays"] > 0
    assert s.kv_pool.used_blocks == 0
    eager, s2 = run(kv_storage="paged", decode_options={"use_step_graphs": False})
    assert s2.step_graphs is None
    assert graphed == eager
    if dtype == "fp32":  # dense differs from paged by rounding only; fp32 leaves no near-tie
        dense, _ = run(kv_storage="dense")
        assert dense == graphed
