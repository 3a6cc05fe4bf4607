"""The ``tdt`` family's greedy search against a per-row loop written from NeMo's statement
(``GreedyTDTInfer``), over a joint whose logits depend on frame and history, so every rule
fires: zero durations, a blank's zero duration made 1, the per-frame symbol limit."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.decode.tdt import TdtDecodeStrategy, TdtOptions
from oasr.engine.decode.tdt_search import tdt_greedy

V, BLANK, DURS = 6, 5, [0, 1, 2, 4]


class CountingPredictor:
    """State: how many labels and their sum; predict embeds both."""

    def init_state(self, batch, device):
        return torch.zeros(batch, 2)

    def predict(self, state):
        return state

    def advance(self, state, tokens, emitted):
        new = torch.stack([state[:, 0] + 1, state[:, 1] + tokens.float()], dim=1)
        return torch.where(emitted[:, None], new, state)


class TableJoiner:
    """Logits from a random table indexed by (frame feature, label count, label sum)."""

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(64, V + len(DURS), generator=g) * 3

    def project_encoder(self, enc):
        return enc

    def project_decoder(self, dec):
        return dec

    def __call__(self, enc, dec):
        key = (enc[:, 0].long() * 7 + dec[:, 0].long() * 3 + dec[:, 1].long()) % 64
        return self.table[key]


def reference(joiner, hidden, n, max_symbols):
    """One row, NeMo's loop: emit at the frame, move by the duration."""
    pred, tokens, frames = CountingPredictor(), [], []
    state = pred.init_state(1, None)
    t, symbols = 0, 0
    while t < n:
        logits = joiner(hidden[t:t + 1], pred.predict(state))[0]
        k = int(logits[:V].argmax())
        d = DURS[int(logits[V:].argmax())]
        if k == BLANK:
            d = max(d, 1)
        else:
            tokens.append(k)
            frames.append(t)
            state = pred.advance(state, torch.tensor([k]), torch.tensor([True]))
            symbols += 1
            if d == 0 and symbols >= max_symbols:
                d = 1
        if d > 0:
            symbols = 0
        t += d
    return tokens, frames


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_symbols", [1, 3])
def test_batched_greedy_equals_the_per_row_loop(seed: int, max_symbols: int) -> None:
    joiner = TableJoiner(seed)
    lens = torch.tensor([30, 17, 1, 9])
    hidden = torch.arange(30, dtype=torch.float32)[None, :, None].expand(4, 30, 1).clone()
    hidden[1] += 5
    hyps = tdt_greedy(CountingPredictor(), joiner, hidden, lens, BLANK, V, DURS, max_symbols)
    got = [(h.tokens, h.frames) for h in hyps]
    want = [reference(joiner, hidden[b], int(lens[b]), max_symbols) for b in range(4)]
    assert got == want
    assert sum(len(t) for t, _ in want) > 0


def test_beam_and_nbest_are_refused() -> None:
    with pytest.raises(ValueError, match="greedily"):
        TdtOptions(beam_size=4).validate()


def test_empty_batch() -> None:
    assert tdt_greedy(CountingPredictor(), TableJoiner(0), torch.zeros(0, 3, 1),
                      torch.zeros(0, dtype=torch.int64), BLANK, V, DURS, 2) == []


def test_family_is_registered_for_tdt() -> None:
    from oasr.engine.decode.registry import DECODE_STRATEGIES

    assert DECODE_STRATEGIES.get("tdt") is TdtDecodeStrategy
