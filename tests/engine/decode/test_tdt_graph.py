"""The device-resident TDT greedy search (``tdt_graph``) against the batched host loop
(``tdt_search.tdt_greedy``, the oracle, itself checked against NeMo's per-row loop in
``test_tdt.py``): the same labels, frames, durations and posteriors; on CUDA replayed from
graphs, one capture serving batches of nearby shapes."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.decode.tdt_graph import TdtDeviceGreedy
from oasr.engine.decode.tdt_search import tdt_greedy
from oasr.models.fastconformer.transducer import LstmPredictor, ReluJoiner
from tests.engine.decode.test_tdt import BLANK, DURS, CountingPredictor, TableJoiner, V

ENC, VOCAB = 6, 9  # the FastConformer heads' encoder width and vocabulary (blank last)
HEAD_DURS = [0, 1, 2, 3, 4]


def _same(ours, ref) -> None:
    assert [h.tokens for h in ours] == [h.tokens for h in ref]
    assert [h.frames for h in ours] == [h.frames for h in ref]
    assert [h.durations for h in ours] == [h.durations for h in ref]
    for a, b in zip(ours, ref):
        assert a.probs == pytest.approx(b.probs, rel=1e-5, abs=1e-6)


def _table_batch(seed: int):
    lens = torch.tensor([30, 17, 1, 9])
    hidden = torch.arange(30, dtype=torch.float32)[None, :, None].expand(4, 30, 1).clone()
    hidden[1] += 5 + seed
    return hidden, lens


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_symbols", [1, 3])
def test_device_loop_equals_the_host_loop(seed: int, max_symbols: int) -> None:
    joiner = TableJoiner(seed)
    hidden, lens = _table_batch(seed)
    ref = tdt_greedy(CountingPredictor(), joiner, hidden, lens, BLANK, V, DURS, max_symbols)
    assert sum(len(h.tokens) for h in ref) > 0
    ours = TdtDeviceGreedy(CountingPredictor(), joiner, BLANK, V, DURS, graphs=False)
    _same(ours.search(hidden, lens, max_symbols), ref)


def _fastconformer_heads(seed: int = 0):
    torch.manual_seed(seed)
    pred = LstmPredictor(VOCAB, 16, 2, blank_id=VOCAB - 1)
    join = ReluJoiner(ENC, 16, VOCAB + len(HEAD_DURS))
    with torch.no_grad():
        for p in [*pred.parameters(), *join.parameters()]:
            p.mul_(3.0)
        join.out.bias[VOCAB] += 4.0  # duration 0 often wins: labels stack on one frame
    return pred.eval(), join.eval()


def _batch(seed: int, device: str = "cpu", rows: int = 4):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, 41, ENC, generator=g)
    lens = torch.tensor([41, 30, 1, 17, 0, 25][:rows])
    return hidden.to(device), lens.to(device)


@pytest.mark.parametrize("max_symbols", [1, 2, 10])
def test_lstm_heads_equal_the_host_loop(max_symbols: int) -> None:
    pred, join = _fastconformer_heads()
    search = TdtDeviceGreedy(pred, join, VOCAB - 1, VOCAB, HEAD_DURS, graphs=False)
    stacked = False  # some frame emits more than one label
    for seed in range(3):
        hidden, lens = _batch(seed)
        ref = tdt_greedy(pred, join, hidden, lens, VOCAB - 1, VOCAB, HEAD_DURS, max_symbols)
        assert sum(len(h.tokens) for h in ref) > 10
        stacked |= any(len(h.frames) > len(set(h.frames)) for h in ref)
        _same(search.search(hidden, lens, max_symbols), ref)
    assert stacked == (max_symbols > 1)  # the per-frame symbol limit is what stops a frame


def test_empty_batch_zero_length_rows_and_bad_arguments() -> None:
    pred, join = _fastconformer_heads()
    search = TdtDeviceGreedy(pred, join, VOCAB - 1, VOCAB, HEAD_DURS, graphs=False)
    assert search.search(torch.zeros(0, 5, ENC), torch.zeros(0, dtype=torch.int64), 2) == []
    hidden, _ = _batch(1)
    lens = torch.tensor([0, 5, 0, 2])
    _same(search.search(hidden, lens, 2),
          tdt_greedy(pred, join, hidden, lens, VOCAB - 1, VOCAB, HEAD_DURS, 2))
    assert search.search(hidden, torch.zeros(4, dtype=torch.int64), 2)[0].tokens == []
    with pytest.raises(ValueError, match="max_symbols_per_step"):
        search.search(hidden, lens, 0)
    with pytest.raises(ValueError, match=r"\(B, T, C\)"):
        search.search(hidden[0], lens, 2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_graph_replays_equal_the_host_loop_on_cuda(dtype) -> None:
    pred, join = _fastconformer_heads()
    pred, join = pred.cuda().to(dtype), join.cuda().to(dtype)
    search = TdtDeviceGreedy(pred, join, VOCAB - 1, VOCAB, HEAD_DURS, graphs=True)
    # 3 and 4 rows round up to one 4-row capture, 6 rows to an 8-row one. In bf16 the graph's
    # GEMMs over padded rows may round a near-tie apart from the oracle's over fewer rows, so
    # there only whole 4-row batches are compared.
    batches = [(0, 4), (1, 3), (2, 4), (3, 6)] if dtype == torch.float32 else [(0, 4), (2, 4)]
    for seed, rows in batches:
        hidden, lens = _batch(seed, "cuda", rows)
        hidden = hidden.to(dtype)
        ref = tdt_greedy(pred, join, hidden, lens, VOCAB - 1, VOCAB, HEAD_DURS, 2)
        ours = search.search(hidden, lens, 2)
        assert [h.tokens for h in ours] == [h.tokens for h in ref]
        assert [h.frames for h in ours] == [h.frames for h in ref]
        assert [h.durations for h in ours] == [h.durations for h in ref]
    assert search.captures == (2 if dtype == torch.float32 else 1) and search.graphs


def test_a_row_past_the_label_buffer_is_decoded_by_the_host_loop(monkeypatch, caplog) -> None:
    import oasr.engine.decode.tdt_graph as tdt_graph

    monkeypatch.setattr(tdt_graph, "WIDTH_PER_FRAME", 1)
    pred, join = _fastconformer_heads()
    hidden, lens = _batch(0)
    ref = tdt_greedy(pred, join, hidden, lens, VOCAB - 1, VOCAB, HEAD_DURS, 10)
    assert max(len(h.tokens) for h in ref) > hidden.shape[1]  # past one label per frame
    search = TdtDeviceGreedy(pred, join, VOCAB - 1, VOCAB, HEAD_DURS, graphs=False)
    with caplog.at_level("WARNING", logger="oasr.engine"):
        _same(search.search(hidden, lens, 10), ref)
    assert "decoded again by the host loop" in caplog.text
