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
