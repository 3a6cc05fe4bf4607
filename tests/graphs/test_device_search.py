"""The GPU search's statement run on the host (oasr._C.wfst.device_search: token_passing.cuh
with the serial executor): the same best path as the CPU search (Kaldi's decoder) wherever
Kaldi's order-dependent early tokens play no part (max_active not binding); its buffers report
their overflow; blank skipping reads the frames the CPU search decodes."""

from __future__ import annotations

import numpy as np
import pytest

from oasr.graphs.search import (
    STATUS,
    SearchOptions,
    decode_rows,
    decoded_frames,
    path_from_arcs,
)
from oasr.graphs.store import load_graph
from oasr.native import native
from tests.graphs.helpers import build_graph, random_log_probs, small_lm


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return load_graph(build_graph(tmp_path_factory.mktemp("g"), "tg", small_lm(limit=20)))


def device_paths(graph, lp, lens, opts, frames=None, capacity=4096, arena=400000, path=2000):
    B, T, _ = lp.shape
    if frames is None:
        frames = np.tile(np.arange(T, dtype=np.int32), (B, 1))
        counts = np.asarray(lens, dtype=np.int32)
    else:
        frames, counts = frames
    rows = native("wfst").device_search(graph.graph.native(), lp, frames, counts, opts.native(),
                                        capacity, arena, path)
    out = []
    for b, (status, cost, arcs) in enumerate(rows):
        out.append((status, None if status & ~STATUS["reached_final"] else path_from_arcs(
            graph.graph, arcs, frames[b, :counts[b]], cost, bool(status & 1))))
    return out


@pytest.mark.parametrize("beam,max_active,min_active", [
    (10.0, 2**31 - 1, 0), (6.0, 2**31 - 1, 300), (16.0, 7000, 200), (12.0, 2**31 - 1, 20)])
def test_equals_the_cpu_search_where_max_active_does_not_bind(graph, beam, max_active,
                                                               min_active):
    lp = random_log_probs(seed=int(beam), batch=6, frames=60)
    lens = np.array([60, 51, 30, 7, 1, 0])
    opts = SearchOptions(beam=beam, max_active=max_active, min_active=min_active)
    cpu = decode_rows(graph.graph.native(), lp, lens, opts)
    for (status, path), ref in zip(device_paths(graph, lp, lens, opts), cpu):
        assert status == (STATUS["reached_final"] if ref.reached_final else 0)
        assert path.labels.tolist() == ref.labels.tolist()
        assert path.entered.tolist() == ref.entered.tolist()
        assert path.words.tolist() == ref.words.tolist()
        assert path.word_steps.tolist() == ref.word_steps.tolist()
        assert path.cost == ref.cost  # the same double arithmetic


def test_max_active_binding_keeps_at_most_kaldis_tokens(graph):
    """Where max_active binds, Kaldi keeps tokens its running cutoff let in early; the exact
    cutoff keeps only those under the final one, so its best path costs at least as much and
    mostly the same."""
    lp = random_log_probs(seed=4, batch=8, frames=60)
    lens = np.full(8, 60)
    opts = SearchOptions(beam=12.0, max_active=40, min_active=5)
    cpu = decode_rows(graph.graph.native(), lp, lens, opts)
    same = 0
    for (status, path), ref in zip(device_paths(graph, lp, lens, opts), cpu):
        assert status & STATUS["reached_final"]
        assert path.cost >= ref.cost - 1e-9
        same += path.labels.tolist() == ref.labels.tolist()
    assert same >= 4


def test_buffers_report_their_overflow(graph):
    lp = random_log_probs(seed=1, batch=1, frames=30)
    opts = SearchOptions(beam=16.0)
    ((status, _),) = device_paths(graph, lp, [30], opts, capacity=8)
    assert status & STATUS["tokens_overflow"]
    ((status, _),) = device_paths(graph, lp, [30], opts, arena=50)
    assert status & STATUS["arena_overflow"]
    ((status, _),) = device_paths(graph, lp, [30], opts, path=5)
    assert status & STATUS["path_overflow"]


def test_blank_skipping_frames_are_the_cpu_searchs(graph):
    rng = np.random.default_rng(3)
    lp = random_log_probs(seed=8, batch=3, frames=90, sharpness=4.0)
    V = lp.shape[2]
    for b in range(3):
        blanky = rng.random(90) < 0.6
        lp[b, blanky] = np.log(0.004 / (V - 1))
        lp[b, blanky, 0] = np.log(0.996)
        # a _ a with the blank skipped: the replay rule must decode the blank frame
        a = np.full(V, np.log(0.1 / (V - 1)), np.float32)
        a[5] = np.log(0.9)
        lp[b, 40], lp[b, 42] = a, a
        lp[b, 41] = np.log(0.004 / (V - 1))
        lp[b, 41, 0] = np.log(0.996)
    lens = np.array([90, 77, 50])
    opts = SearchOptions(beam=12.0, blank_skip_threshold=0.99)
    cpu = decode_rows(graph.graph.native(), lp, lens, opts)
    frames = np.zeros((3, 90), np.int32)
    counts = np.zeros(3, np.int32)
    for b in range(3):
        kept = decoded_frames(lp[b, :, 0], lp[b].argmax(-1), int(lens[b]), 0, 0.99)
        assert kept.tolist() == cpu[b].frames.tolist()
        assert 41 in kept.tolist()  # replayed
        frames[b, :len(kept)], counts[b] = kept, len(kept)
    assert counts.max() < 80
    for (status, path), ref in zip(device_paths(graph, lp, lens, opts, (frames, counts)), cpu):
        assert bool(status & STATUS["reached_final"]) == ref.reached_final
        assert path.labels.tolist() == ref.labels.tolist()
        assert path.frames.tolist() == ref.frames.tolist()
        assert path.words.tolist() == ref.words.tolist()


def test_blank_skipping_reads_no_frames_of_an_empty_row():
    lp = random_log_probs(seed=4, batch=1, frames=10)[0]
    assert decoded_frames(lp[:, 0], lp.argmax(-1), 0, 0, 0.9).tolist() == []
    assert decoded_frames(lp[:, 0], lp.argmax(-1), 0, 0, 1.0).tolist() == []
