"""The device-resident greedy transducer search (``transducer_graph``) against the host loop
(``transducer_search.greedy_search``, the oracle): the same labels, frames, scores and
posteriors for label-window and recurrent predictors; on CUDA, replayed from graphs."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.decode.transducer_graph import DeviceGreedy, greedy_search_device
from oasr.engine.decode.transducer_search import greedy_search
from oasr.models.fastconformer.transducer import LstmPredictor, ReluJoiner
from tests.engine.decode.test_transducer_family import ENC, VOCAB, FakeTransducer


def _fastconformer_heads(seed: int = 0):
    torch.manual_seed(seed)
    pred = LstmPredictor(VOCAB, 16, 2, blank_id=VOCAB - 1)
    join = ReluJoiner(ENC, 16, VOCAB)
    with torch.no_grad():
        for p in [*pred.parameters(), *join.parameters()]:
            p.mul_(3.0)
    return pred.eval(), join.eval()


def _heads(kind: str, seed: int = 0):
    if kind == "lstm_dataclass":
        return _fastconformer_heads(seed)
    model = FakeTransducer(seed, recurrent=kind == "lstm_tuple").eval()
    return model.predictor, model.joiner


def _batch(seed: int, device: str = "cpu"):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(4, 37, ENC, generator=g)
    return hidden.to(device), torch.tensor([37, 30, 1, 17]).to(device)


def _same(ours, ref) -> None:
    assert [h.tokens for h in ours] == [h.tokens for h in ref]
    assert [h.frames for h in ours] == [h.frames for h in ref]
    for a, b in zip(ours, ref):
        assert a.score == pytest.approx(b.score, rel=1e-6, abs=1e-6)
        assert a.probs == pytest.approx(b.probs, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("kind", ["stateless", "lstm_tuple", "lstm_dataclass"])
@pytest.mark.parametrize("max_sym", [1, 3])
def test_device_loop_equals_the_host_loop(kind, max_sym):
    pred, join = _heads(kind)
    for seed in range(3):
        hidden, lens = _batch(seed)
        ref = greedy_search(pred, join, hidden, lens, max_sym_per_frame=max_sym)
        assert sum(len(h.tokens) for h in ref) > 10  # labels are emitted
        _same(greedy_search_device(pred, join, hidden, lens, max_sym_per_frame=max_sym), ref)


def test_unk_advances_the_frame_like_blank():
    pred, join = _heads("stateless")
    hidden, lens = _batch(5)
    ref = greedy_search(pred, join, hidden, lens, max_sym_per_frame=2, unk_id=3)
    _same(greedy_search_device(pred, join, hidden, lens, max_sym_per_frame=2, unk_id=3), ref)


def test_empty_batch_and_zero_length_rows():
    pred, join = _heads("stateless")
    assert DeviceGreedy(pred, join).search(torch.zeros(0, 5, ENC), torch.zeros(0)) == []
    hidden, _ = _batch(1)
    lens = torch.tensor([0, 5, 0, 2])
    _same(greedy_search_device(pred, join, hidden, lens),
          greedy_search(pred, join, hidden, lens))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", ["stateless", "lstm_dataclass"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_replays_equal_the_host_loop_on_cuda(kind, dtype):
    pred, join = _heads(kind)
    pred, join = pred.cuda().to(dtype), join.cuda().to(dtype)
    search = DeviceGreedy(pred, join, graphs=True)
    for seed in range(3):  # one capture serves batches of the same rows and frame bucket
        hidden, lens = _batch(seed, "cuda")
        hidden = hidden.to(dtype)
        ref = greedy_search(pred, join, hidden, lens, max_sym_per_frame=2)
        ours = search.search(hidden, lens, max_sym_per_frame=2)
        assert [h.tokens for h in ours] == [h.tokens for h in ref]
        assert [h.frames for h in ours] == [h.frames for h in ref]
    assert search.captures == 1 and search.graphs
