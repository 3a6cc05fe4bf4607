"""The ``aed`` family on paged decoder KV: the whole greedy decode equals dense storage token
for token, through merges, retirement and compaction; the KV budget holds rows back and they
still complete; and the step-graph path (capture faked on a CPU) changes nothing.

Oracle: the same engine on dense storage (``kv_storage="dense"``, the existing path, itself
checked against transformers in tests/models/whisper).
"""

from __future__ import annotations

import pytest
import torch

from oasr.engine.config import EngineConfig
from oasr.engine.decode.aed import AedDecodeStrategy
from oasr.engine.decoder_graph import DecoderStepGraphs
from oasr.engine.engine import ASREngine
from oasr.engine.request import DecodingOptions, Request
from tests.helpers.fake_graphs import FakeCapture
from tests.helpers.tiny_whisper import (
    TinyWhisper,
    random_audio,
    run_engine,
    torch_threads,
)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with torch_threads(1):
        yield


def _audio(n: int, offset: int = 0) -> list:
    return [random_audio(offset + i) for i in range(n)]


def _ids(outs) -> dict:
    return {k: (o.token_ids, o.finish_reason) for k, o in outs.items()}


def _drive(tw: TinyWhisper, audio, decodings=None, graphs: bool = False, **config):
    """Tick an engine by hand: outputs, per-tick (groups, held blocks, live rows), strategy."""
    engine = ASREngine(EngineConfig(device="cpu", **config), loaded=tw.loaded)
    strategy: AedDecodeStrategy = engine.strategy  # type: ignore[assignment]
    if graphs:
        strategy.step_graphs = DecoderStepGraphs(capture=FakeCapture())
    decodings = decodings or [None] * len(audio)
    for i, (a, d) in enumerate(zip(audio, decodings)):
        engine.add_request(Request(str(i), a, d or DecodingOptions()))
    outs, ticks = {}, []
    while engine.has_unfinished():
        for o in engine.step():
            outs[o.request_id] = o
        pool = strategy.kv_budget.pool if strategy.kv_storage == "paged" else None
        ticks.append((len(strategy.groups), pool.used_blocks if pool else None,
                      strategy.active_rows, [g.size for g in strategy.groups]))
    return outs, ticks, strategy


@pytest.mark.parametrize("block_size,compact_fraction", [(1, 0.25), (4, 0.0), (16, 0.25)])
def test_paged_decode_equals_dense_through_merges_retirement_and_compaction(
        tiny_eos, block_size, compact_fraction):
    audio = _audio(9, 100)
    caps = [None, 5, None, 11, None, None, 3, None, None]  # tables of different widths merge
    decodings = [DecodingOptions(max_new_tokens=c) for c in caps]
    config = dict(max_batch_size=2, decode_steps_per_tick=2, max_new_tokens=20,
                  decode_options={"compact_fraction": compact_fraction})
    dense, _, ds = _drive(tiny_eos, audio, decodings, kv_storage="dense", **config)
    paged, ticks, ps = _drive(tiny_eos, audio, decodings, kv_storage="paged",
                              kv_block_size=block_size, **config)
    assert ds.kv_storage == "dense" and ps.kv_storage == "paged"
    assert _ids(paged) == _ids(dense)
    assert {o.finish_reason for o in paged.values()} == {"stop", "length"}
    # Merged: micro-batches of two were absorbed into one group of more rows.
    assert any(n == 1 and sizes[0] > 2 for n, _, _, sizes in ticks)
    # Retirement freed blocks while the group was still decoding, and everything at the end.
    used = [u for _, u, _, _ in ticks]
    assert any(b < a for a, b in zip(used, used[1:]) if b)
    assert ps.kv_budget.pool.used_blocks == 0


def test_paged_rows_hold_only_their_own_blocks(tiny):
    """A live row holds its self + cross reservation; a finished one holds nothing."""
    audio = _audio(5, 20)
    caps = [3, 7, None, 12, 1]
    n = 16
    config = dict(max_batch_size=5, max_new_tokens=n, decode_steps_per_tick=2,
                  kv_block_size=4)
    decodings = [DecodingOptions(max_new_tokens=c) for c in caps]
    outs, ticks, s = _drive(tiny, audio, decodings, kv_storage="paged", **config)
    dense, _, _ = _drive(tiny, audio, decodings, kv_storage="dense", **config)
    assert _ids(outs) == _ids(dense)
    cap = len(tiny.config.sot_sequence) + n  # the group reserves the largest row cap
    per_row = -(-cap // 4) + -(-tiny.config.max_source_positions // 4)
    for _, used, live, _ in ticks:
        assert used == live * per_row


def test_timestamp_and_plain_rows_merge_on_paged_storage(tiny_eos):
    audio = _audio(6, 40)
    decodings = [DecodingOptions(timestamps=i % 2 == 1) for i in range(6)]
    config = dict(max_batch_size=6, max_new_tokens=12)
    dense = run_engine(tiny_eos.loaded, audio, decodings, kv_storage="dense", **config)
    paged = run_engine(tiny_eos.loaded, audio, decodings, kv_storage="paged", **config)
    assert _ids(paged) == _ids(dense)
    assert [o.segments for o in paged.values()] == [o.segments for o in dense.values()]


@pytest.mark.parametrize("interval", [1, 3])
def test_the_graph_path_changes_nothing(tiny_eos, interval):
    """Steps replayed through DecoderStepGraphs (a CPU stand-in for capture) give the eager
    paged decode, rows, merges and compaction included."""
    audio = _audio(8, 60)
    config = dict(max_batch_size=3, decode_steps_per_tick=3, max_new_tokens=18,
                  kv_storage="paged", kv_block_size=4,
                  decode_options={"eos_check_interval": interval})
    eager, _, _ = _drive(tiny_eos, audio, **config)
    graphed, _, s = _drive(tiny_eos, audio, graphs=True, **config)
    assert _ids(graphed) == _ids(eager)
    assert s.step_graphs.stats["replays"] > 0 and s.step_graphs.stats["eager"] == 0
    assert len({k[0] for k in s.step_graphs.graphs}) > 1  # several row counts were replayed


@pytest.mark.parametrize("storage", ["paged", "dense"])
def test_the_kv_budget_holds_rows_back_and_they_still_complete(tiny_eos, storage):
    audio = _audio(7, 80)
    n = 14
    free = run_engine(tiny_eos.loaded, audio, max_batch_size=4, max_new_tokens=n)
    probe = ASREngine(EngineConfig(device="cpu", max_new_tokens=n, kv_storage=storage,
                                   kv_block_size=8, decode_kv_budget_gib=1.0),
                      loaded=tiny_eos.loaded).strategy.kv_budget
    rows = 2
    gib = (rows * probe.row_bytes + (probe.block_bytes if storage == "paged" else 0)) / 2**30
    outs, ticks, s = _drive(tiny_eos, audio, max_batch_size=4, max_new_tokens=n,
                            kv_storage=storage, kv_block_size=8, decode_kv_budget_gib=gib,
                            decode_steps_per_tick=2)
    assert _ids(outs) == _ids(free)
    assert len(outs) == 7 and all(o.error is None for o in outs.values())
    assert max(live for _, _, live, _ in ticks) == rows  # admission waited on the budget
    if storage == "dense":
        assert max(sum(sizes) for *_, sizes in ticks) <= rows  # idle rows count until compacted
    else:
        assert max(used for _, used, _, _ in ticks) <= rows * s.kv_budget.row_blocks


def test_a_budget_too_small_for_one_row_is_refused_at_construction(tiny_eos):
    with pytest.raises(ValueError, match="holds no row"):
        ASREngine(EngineConfig(device="cpu", kv_storage="paged", decode_kv_budget_gib=1e-7),
                  loaded=tiny_eos.loaded)


def test_storage_resolution_on_a_cpu(tiny_eos):
    def strategy(**config):
        return ASREngine(EngineConfig(device="cpu", **config), loaded=tiny_eos.loaded).strategy

    auto = strategy()
    assert auto.kv_storage == "dense" and auto.step_graphs is None and auto.kv_budget is None
    paged = strategy(kv_storage="paged")
    assert paged.kv_storage == "paged" and paged.step_graphs is None  # graphs need CUDA
    beam = strategy(decode_options={"beam_size": 2})
    assert beam.kv_storage == "dense"  # beams repeat rows, so auto keeps them dense
    with pytest.raises(ValueError, match="kv_storage='paged' cannot serve beam search"):
        strategy(kv_storage="paged", decode_options={"beam_size": 2})
    with pytest.raises(ValueError, match="kv_storage"):
        EngineConfig(kv_storage="pages").validate()


def test_beam_search_under_auto_storage_is_the_dense_decode(tiny_eos):
    audio = _audio(4, 90)
    n = 10
    base = run_engine(tiny_eos.loaded, audio, max_batch_size=4, max_new_tokens=n,
                      kv_storage="dense", decode_options={"beam_size": 2})
    outs = run_engine(tiny_eos.loaded, audio, max_batch_size=4, max_new_tokens=n,
                      kv_storage="auto", decode_options={"beam_size": 2})
    assert _ids(outs) == _ids(base)


def test_paged_state_refuses_a_beam_select(tiny_eos):
    tw = tiny_eos
    engine = ASREngine(EngineConfig(device="cpu", kv_storage="paged", max_new_tokens=20,
                                    decode_steps_per_tick=1), loaded=tw.loaded)
    engine.add_request(Request("0", _audio(1)[0]))
    engine.step()
    g = engine.strategy.groups[0]
    with pytest.raises(ValueError, match="beam search keeps dense"):
        tw.model.decoder.select(g.state, torch.tensor([0, 0]))


def test_word_timings_read_the_cross_kv_from_paged_storage():
    """The aligner re-forwards against each finished row's cross K/V, read out of the pool."""
    import numpy as np

    from tests.transcribe.conftest import build_tiny_loaded

    def words(storage: str) -> dict:
        loaded = build_tiny_loaded()
        loaded.model.config.alignment_heads = [[0, 0], [0, 1]]
        engine = ASREngine(EngineConfig(device="cpu", max_new_tokens=4, kv_storage=storage),
                           loaded=loaded)
        rng = np.random.default_rng(0)
        reqs = [Request(str(i), (0.1 * rng.standard_normal(16000 * 3)).astype(np.float32),
                        DecodingOptions(word_timestamps=True)) for i in range(3)]
        outs = {o.request_id: o for o in engine.run(reqs)}
        assert all(o.error is None for o in outs.values()), outs
        return {k: [(w.word, w.start, w.end) for w in o.words] for k, o in outs.items()}

    paged = words("paged")
    assert any(paged.values())
    assert paged == words("dense")
