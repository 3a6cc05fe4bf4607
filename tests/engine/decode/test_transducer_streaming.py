"""``TransducerGreedyStream`` fed chunk by chunk equals ``greedy_search`` on the whole
sequence (tiny random Parakeet RNN-T, recurrent predictor)."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.decode.transducer_search import greedy_search
from oasr.engine.decode.transducer_streaming import TransducerGreedyStream
from tests.models.tiny_configs import build_tiny


@pytest.mark.parametrize("sizes", [[1] * 12, [5, 0, 7], [12]])
def test_chunked_greedy_equals_offline(sizes: list[int]) -> None:
    torch.manual_seed(0)
    model, _ = build_tiny("parakeet_rnnt")
    with torch.no_grad():
        for p in model.joint.out.parameters():
            p.mul_(8.0)  # emissions, not only blanks
        hidden = torch.randn(1, 12, model.config.d_model)
        ref = greedy_search(model.predictor, model.joiner, hidden, torch.tensor([12]),
                            max_sym_per_frame=3)[0]
        stream = TransducerGreedyStream(model.predictor, model.joiner, 3)
        pos = 0
        for n in sizes:
            stream.feed(hidden[0, pos:pos + n])
            pos += n
    assert ref.tokens
    got = stream.best()
    assert (got.tokens, got.frames) == (ref.tokens, ref.frames)
    assert got.probs == pytest.approx(ref.probs)
    assert stream.stable_prefix() == len(ref.tokens)
    stream.reset()
    assert stream.best().tokens == [] and stream.frame == 0


def test_feed_streams_batches_a_cohort_as_each_stream_alone() -> None:
    """Three streams fed in cohorts of varying membership and chunk lengths (one row empty):
    each equals ``greedy_search`` on its whole sequence."""
    from oasr.engine.decode.transducer_streaming import feed_streams

    torch.manual_seed(1)
    model, _ = build_tiny("parakeet_rnnt")
    with torch.no_grad():
        for p in model.joint.out.parameters():
            p.mul_(8.0)
        seqs = [torch.randn(n, model.config.d_model) for n in (13, 9, 11)]
        streams = [TransducerGreedyStream(model.predictor, model.joiner, 3) for _ in seqs]
        pos = [0, 0, 0]
        steps = [[(0, 4), (1, 3)], [(0, 5), (1, 0), (2, 6)], [(0, 4), (1, 6), (2, 5)]]
        for step in steps:
            rows = [i for i, _ in step]
            width = max(n for _, n in step)
            x = torch.zeros(len(rows), width, model.config.d_model)
            for r, (i, n) in enumerate(step):
                x[r, :n] = seqs[i][pos[i]:pos[i] + n]
                pos[i] += n
            feed_streams([streams[i] for i in rows], x, torch.tensor([n for _, n in step]))
        assert pos == [13, 9, 11]
        for seq, stream in zip(seqs, streams):
            ref = greedy_search(model.predictor, model.joiner, seq[None],
                                torch.tensor([seq.shape[0]]), max_sym_per_frame=3)[0]
            got = stream.best()
            assert ref.tokens and (got.tokens, got.frames) == (ref.tokens, ref.frames)
            assert got.probs == pytest.approx(ref.probs)
            assert stream.frame == seq.shape[0]
