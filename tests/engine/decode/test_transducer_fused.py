"""The one-call transducer greedy decode (``transducer_fused``, greedy_decode.cuh) against the
host loop (``transducer_search.greedy_search``, the oracle): labels and frames identical,
scores and posteriors within fp32 rounding, on the host executor here and (``-m gpu``) as one
CUDA launch per batch; the family takes it when asked (``fused=true``) and re-decodes an
overflowing batch."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest
import torch

from oasr import ops
from oasr.engine.decode.transducer_fused import _ROUTE, FusedGreedy, fused_tensors
from oasr.engine.decode.transducer_search import greedy_search
from oasr.models.fastconformer.transducer import LstmPredictor, ReluJoiner
from oasr.models.transducer.stateless import AdditiveJoiner, StatelessPredictor
from oasr.ops import dispatch
from tests.engine.decode.test_transducer_family import requests, strategy

VOCAB = 29


def _heads(context: int, relu: bool = False, seed: int = 0, enc: int = 20, dec: int = 12,
           join: int = 21):
    torch.manual_seed(seed)
    pred = StatelessPredictor(VOCAB, dec, blank_id=0, context_size=context)
    joiner = ReluJoiner(enc, dec, VOCAB) if relu else AdditiveJoiner(enc, dec, join, VOCAB)
    with torch.no_grad():  # sharp logits, so labels are emitted
        for p in [*pred.parameters(), *joiner.parameters()]:
            p.mul_(3.0)
    return pred.eval(), joiner.eval()


def _batch(seed: int, enc: int = 20, device: str = "cpu", frames: int = 41):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(4, frames, enc, generator=g).to(device),
            torch.tensor([41, 33, 1, 18]).to(device))


def _same(ours, ref, rel=1e-5) -> None:
    assert [h.tokens for h in ours] == [h.tokens for h in ref]
    assert [h.frames for h in ours] == [h.frames for h in ref]
    for a, b in zip(ours, ref, strict=True):
        assert a.score == pytest.approx(b.score, rel=rel, abs=1e-4)
        assert a.probs == pytest.approx(b.probs, rel=rel, abs=1e-5)


@pytest.mark.parametrize("context,relu", [(1, False), (2, False), (3, False), (2, True)])
@pytest.mark.parametrize("max_sym", [1, 3])
def test_host_executor_equals_the_loop(context, relu, max_sym):
    pred, joiner = _heads(context, relu)
    fused = FusedGreedy(pred, joiner, unk_id=None)
    assert fused.declared and fused.supports(torch.zeros(1, 1, 20))
    compared = 0
    for seed in range(4):
        hidden, lens = _batch(seed, frames=90)  # padded: the buffer holds 3 labels a frame
        ref = greedy_search(pred, joiner, hidden, lens, max_sym_per_frame=max_sym)
        assert sum(len(h.tokens) for h in ref) > 20  # labels are emitted
        if max_sym > 1:  # and some frame emits more than one
            assert any(len(h.frames) > len(set(h.frames)) for h in ref)
        got = fused.search(hidden, lens, max_sym)
        cap = min(2, max_sym) * hidden.shape[1] + 32  # > 3 * 41
        assert max(len(h.tokens) for h in ref) <= cap
        _same(got, ref)
        compared += 1
    assert compared == 4


def test_unk_and_zero_length_rows():
    pred, joiner = _heads(2)
    hidden, _ = _batch(7)
    lens = torch.tensor([0, 5, 0, 41])
    ref = greedy_search(pred, joiner, hidden, lens, max_sym_per_frame=2, unk_id=3)
    got = FusedGreedy(pred, joiner, unk_id=3).search(hidden, lens, 2)
    assert got[0].tokens == got[2].tokens == [] and 3 not in sum((h.tokens for h in got), [])
    _same(got, ref)


def test_an_overflowing_batch_returns_none_and_the_family_redecodes_it():
    pred, joiner = _heads(2)
    with torch.no_grad():  # label 1 wins every step: a frame emits max_sym labels
        joiner.output_linear.bias[1] = 1e4
    hidden, lens = torch.randn(2, 1, 20), torch.tensor([1, 1])
    fused = FusedGreedy(pred, joiner, unk_id=None)
    assert fused.search(hidden, lens, 40) is None  # 40 labels > min(2, 40) * 1 + 32
    assert [h.tokens for h in fused.search(hidden, lens, 30)] == [[1] * 30] * 2

    s = strategy({"max_sym_per_frame": "40", "fused": "true"})
    s.joiner.output_linear.bias.data[1] = 1e4
    outs = s.decode_offline(torch.randn(2, 1, 16), torch.tensor([1, 1]), requests(2))
    assert [o.token_ids for o in outs] == [[1] * 40] * 2  # the loop, not truncated at 34


def test_the_family_takes_it_when_asked_and_equals_the_loop():
    hidden, lens = torch.randn(3, 23, 16), torch.tensor([23, 9, 15])
    on, off = strategy({"fused": "true"}), strategy()
    assert on._use_fused(hidden) and not off._use_fused(hidden)
    got = on.decode_offline(hidden, lens, requests(3))
    want = off.decode_offline(hidden, lens, requests(3))
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert sum(len(o.token_ids) for o in got) > 5


def test_undeclared_models_keep_the_loop_and_refuse_fused_true():
    assert fused_tensors(LstmPredictor(VOCAB, 8, 1, blank_id=0), ReluJoiner(8, 8, VOCAB)) is None
    assert not strategy(recurrent=True)._use_fused(torch.zeros(1, 1, 16))
    assert not strategy()._use_fused(torch.zeros(1, 1, 16))  # off unless asked
    with pytest.raises(ValueError, match="stateless predictor and an additive joiner"):
        strategy({"fused": "true"}, recurrent=True)


@pytest.fixture
def exact_fp32_reference():
    """The loop's fp32 convs and GEMMs without TF32: cuDNN rounds the predictor's grouped conv
    to TF32 by default (``torch.backends.cudnn.allow_tf32``), which moves a row's summed
    logits by up to ~1e-3 relative, where the kernel computes in fp32."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("max_sym", [1, 3])
def test_cuda_launch_equals_the_loop(dtype, max_sym, exact_fp32_reference):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from oasr.ops.build import toolchain_available

    if not toolchain_available():
        pytest.skip("needs nvcc or a prebuilt transducer_cuda library")
    # Widths past one warp's stride and a vocabulary past the block, so every reduction loops.
    pred, joiner = _heads(2, enc=72, dec=64, join=300)
    pred, joiner = pred.cuda().to(dtype), joiner.cuda().to(dtype)
    # fp32 copies of the half weights for the half runs' second oracle (Module.float() would
    # convert the half modules themselves, in place).
    pred32, joiner32 = copy.deepcopy(pred).float(), copy.deepcopy(joiner).float()
    fused = FusedGreedy(pred, joiner, unk_id=None)
    for seed in range(3):
        hidden, lens = _batch(seed, enc=72, device="cuda", frames=90)
        hidden = hidden.to(dtype)
        ref = greedy_search(pred, joiner, hidden, lens, max_sym_per_frame=max_sym)
        assert fused.supports(hidden)
        got = fused.search(hidden, lens, max_sym)
        if dtype == torch.float32:
            _same(got, ref)
        else:  # half weights: the GEMVs sum in another order, so compare the fp32 kernel's
            ref32 = greedy_search(pred32, joiner32, hidden.float(), lens,
                                  max_sym_per_frame=max_sym)
            agree = sum(a.tokens == b.tokens for a, b in zip(got, ref, strict=True))
            assert agree >= 3 or sum(a.tokens == b.tokens for a, b in zip(got, ref32)) >= 3


# -- routing (op ``transducer_greedy`` of oasr.ops), decided without a GPU ---------------------

@dataclass
class FakeCudaHidden:
    """Stands in for CUDA encoder frames: the route and ``search`` read only these before the
    launch (a route that does not serve returns before touching the data)."""

    dtype: torch.dtype = torch.float16
    is_cuda: bool = True
    device: torch.device = torch.device("cuda", 0)
    shape: tuple[int, int, int] = (2, 7, 20)


@pytest.fixture
def routed(monkeypatch):
    """A clean backend and counts; ``buildable`` / ``smem_fits`` set per test."""
    from oasr.kernels import transducer_cuda

    def place(buildable: bool = True, fits: bool = True) -> None:
        monkeypatch.setattr(dispatch, "buildable", lambda spec: buildable)
        monkeypatch.setattr(transducer_cuda, "buildable", lambda spec: buildable)
        monkeypatch.setattr(transducer_cuda, "smem_fits", lambda *a: fits)
        ops.set_backend(None)  # every route re-resolves with the patched build state

    ops.set_backend(None)
    base = ops.snapshot()
    yield place, lambda: ops.counts_since(base)
    ops.set_backend(None)


def _fused() -> FusedGreedy:
    return FusedGreedy(*_heads(2), unk_id=None)


@pytest.mark.parametrize("placement,hidden,key", [
    ({}, FakeCudaHidden(), ("kernel", "transducer_greedy")),
    ({}, FakeCudaHidden(dtype=torch.float32), ("kernel", "transducer_greedy")),
    ({"fits": False}, FakeCudaHidden(), ("gap", "transducer-scratch")),
    ({}, FakeCudaHidden(dtype=torch.float64), ("gap", "transducer-scratch")),
    ({"buildable": False}, FakeCudaHidden(), ("gap", "cuda-toolchain")),
])
def test_the_cuda_launch_is_routed_and_counted_by_ops(routed, placement, hidden, key):
    from oasr.kernels import transducer_cuda

    place, counts = routed
    place(**placement)
    fused = _fused()
    served = key[0] == "kernel"
    assert fused.supports(hidden) == served  # the preview counts nothing
    assert counts() == {}
    if served:
        assert _ROUTE.select(hidden, fused.tensors) is transducer_cuda.greedy_decode
    else:  # the family's graphed torch loop serves it
        assert fused.search(hidden, torch.tensor([7, 3]), 2) is None
    assert counts() == {key: 1}


def test_layers_backend_torch_sends_the_search_to_the_torch_loop(routed, monkeypatch):
    place, counts = routed
    monkeypatch.setenv("OASR_LAYERS_BACKEND", "torch")
    place()
    fused = _fused()
    assert not fused.supports(FakeCudaHidden())
    assert fused.search(FakeCudaHidden(), torch.tensor([7, 3]), 2) is None
    assert counts() == {("torch_backend", "transducer_greedy"): 1}


def test_cpu_frames_are_out_of_scope_and_run_the_host_executor(routed):
    place, counts = routed
    place()
    pred, joiner = _heads(2)
    hidden, lens = _batch(3)
    got = FusedGreedy(pred, joiner, unk_id=None).search(hidden, lens, 2)
    mine = {k: n for k, n in counts().items() if k[1].startswith("transducer_greedy")}
    assert mine == {("out_of_scope", "transducer_greedy:cpu"): 1}  # the layers count apart
    _same(got, greedy_search(pred, joiner, hidden, lens, max_sym_per_frame=2))
