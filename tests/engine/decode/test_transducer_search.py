"""Transducer greedy / modified beam search against icefall's searches on one random model."""

from __future__ import annotations

import pytest
import torch

from oasr.engine.decode.transducer_search import greedy_search, modified_beam_search
from oasr.models.transducer.stateless import AdditiveJoiner, StatelessPredictor
from tests.helpers.zipformer_oracle import ORACLE_MISSING, oracle

VOCAB, ENC, DEC, JOIN, CTX = 11, 12, 16, 20, 2


def _upstream_model(up, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Module()
    model.decoder = up.model.Decoder(VOCAB, DEC, blank_id=0, context_size=CTX)
    model.joiner = up.model.Joiner(ENC, DEC, JOIN, VOCAB)
    with torch.no_grad():  # sharper logits than the init, so labels are emitted
        for p in model.parameters():
            p.mul_(4.0)
    return model.eval()


def _ours(upstream: torch.nn.Module) -> tuple[StatelessPredictor, AdditiveJoiner]:
    pred = StatelessPredictor(VOCAB, DEC, blank_id=0, context_size=CTX)
    joiner = AdditiveJoiner(ENC, DEC, JOIN, VOCAB)
    pred.load_state_dict(upstream.decoder.state_dict(), strict=True)
    joiner.load_state_dict(upstream.joiner.state_dict(), strict=True)
    return pred.eval(), joiner.eval()


@pytest.fixture(scope="module")
def up():
    mod = oracle()
    if mod is None:
        pytest.skip(ORACLE_MISSING)
    return mod


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 17, ENC, generator=g), torch.tensor([17, 9, 13])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_matches_icefall_batch_greedy(up, seed):
    model = _upstream_model(up, seed)
    pred, joiner = _ours(model)
    hidden, lens = _inputs(seed)
    ref = up.search.greedy_search(model, hidden, lens, return_timestamps=True)
    got = greedy_search(pred, joiner, hidden, lens)
    assert sum(len(h) for h in ref.hyps) > 0, "the random model emitted nothing"
    assert [h.tokens for h in got] == ref.hyps
    assert [h.frames for h in got] == ref.timestamps


@pytest.mark.parametrize("seed", [0, 3])
def test_greedy_max_sym_matches_icefall(up, seed):
    model = _upstream_model(up, seed)
    pred, joiner = _ours(model)
    hidden, lens = _inputs(seed)
    for row in range(hidden.shape[0]):
        h, n = hidden[row:row + 1, :int(lens[row])], lens[row:row + 1]
        ref = up.search.greedy_search(model, h, n, max_sym_per_frame=3, return_timestamps=True)
        got = greedy_search(pred, joiner, h, n, max_sym_per_frame=3)[0]
        assert (got.tokens, got.frames) == (ref.hyps[0], ref.timestamps[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("beam", [2, 4])
def test_modified_beam_matches_icefall(up, seed, beam):
    model = _upstream_model(up, seed)
    pred, joiner = _ours(model)
    hidden, lens = _inputs(seed)
    with torch.no_grad():
        ref = up.search.modified_beam_search(model, hidden, lens, beam=beam,
                                             return_timestamps=True)
    got = modified_beam_search(pred, joiner, hidden, lens, beam=beam)
    assert sum(len(h) for h in ref.hyps) > 0
    assert [b[0].tokens for b in got] == ref.hyps
    assert [b[0].frames for b in got] == ref.timestamps


@pytest.mark.parametrize("seed", [0, 4, 6])
def test_modified_beam_ragged_batch_of_five_matches_icefall(up, seed):
    model = _upstream_model(up, seed)
    pred, joiner = _ours(model)
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(5, 19, ENC, generator=g)
    lens = torch.tensor([7, 19, 1, 12, 19])  # ragged, one single frame, a tie at the longest
    with torch.no_grad():
        ref = up.search.modified_beam_search(model, hidden, lens, beam=4, return_timestamps=True)
    got = modified_beam_search(pred, joiner, hidden, lens, beam=4)
    assert sum(len(h) for h in ref.hyps) > 0
    assert [b[0].tokens for b in got] == ref.hyps
    assert [b[0].frames for b in got] == ref.timestamps


def test_modified_beam_rows_are_independent_of_their_batch(up):
    pred, joiner = _ours(_upstream_model(up, 2))
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(4, 15, ENC, generator=g)
    lens = torch.tensor([15, 0, 6, 11])
    batched = modified_beam_search(pred, joiner, hidden, lens, beam=4, n_best=4)
    assert [(h.tokens, h.frames, h.score) for h in batched[1]] == [([], [], 0.0)]
    for row in (0, 2, 3):
        alone = modified_beam_search(pred, joiner, hidden[row:row + 1], lens[row:row + 1],
                                     beam=4, n_best=4)[0]
        assert [(h.tokens, h.frames) for h in batched[row]] == [(h.tokens, h.frames)
                                                                for h in alone]
        for a, b in zip(batched[row], alone):
            assert a.score == pytest.approx(b.score, abs=1e-5)
            assert a.probs == pytest.approx(b.probs, abs=1e-6)


def test_beam_one_is_greedy_token_for_token(up):
    model = _upstream_model(up, 5)
    pred, joiner = _ours(model)
    hidden, lens = _inputs(5)
    greedy = greedy_search(pred, joiner, hidden, lens)
    beam = modified_beam_search(pred, joiner, hidden, lens, beam=1)
    assert any(h.tokens for h in greedy)
    assert [(b[0].tokens, b[0].frames) for b in beam] == [(h.tokens, h.frames) for h in greedy]


def test_n_best_is_ranked_and_distinct(up):
    pred, joiner = _ours(_upstream_model(up, 1))
    hidden, lens = _inputs(1)
    rows = modified_beam_search(pred, joiner, hidden, lens, beam=4, n_best=3)
    best = modified_beam_search(pred, joiner, hidden, lens, beam=4)
    for row, top in zip(rows, best):
        assert 1 < len(row) <= 3
        assert row[0].tokens == top[0].tokens
        assert len({tuple(h.tokens) for h in row}) == len(row)
        norm = [h.score / (len(h.tokens) + CTX) for h in row]
        assert norm == sorted(norm, reverse=True)


def test_predictor_window_advances_only_emitting_rows():
    pred = StatelessPredictor(VOCAB, DEC, blank_id=0, context_size=CTX)
    state = pred.init_state(2, torch.device("cpu"))
    assert state.tolist() == [[-1, 0], [-1, 0]]
    state = pred.advance(state, torch.tensor([5, 7]), torch.tensor([True, False]))
    assert state.tolist() == [[0, 5], [-1, 0]]
    assert [s.tolist() for s in pred.unstack_states(pred.stack_states([state[:1], state[1:]]))] \
        == [[[0, 5]], [[-1, 0]]]


def test_bad_arguments_raise():
    pred = StatelessPredictor(VOCAB, DEC, blank_id=0, context_size=CTX)
    joiner = AdditiveJoiner(ENC, DEC, JOIN, VOCAB)
    hidden, lens = _inputs(0)
    with pytest.raises(ValueError, match="max_sym_per_frame"):
        greedy_search(pred, joiner, hidden, lens, max_sym_per_frame=0)
    with pytest.raises(ValueError, match="beam"):
        modified_beam_search(pred, joiner, hidden, lens, beam=0)
    with pytest.raises(ValueError, match="lengths"):
        greedy_search(pred, joiner, hidden, lens[:2])
