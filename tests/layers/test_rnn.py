"""oasr.layers.rnn against nn.LSTM holding the same state_dict.

Variable lengths are checked against nn.utils.rnn.pack_padded_sequence + the torch module,
padded back with pad_packed_sequence.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from oasr.layers.rnn import LSTM
from oasr.ops import gaps
from tests.helpers.routing import patch_routing

FP32 = {"atol": 1e-5, "rtol": 1e-5}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pair(*args, **kwargs):
    """nn.LSTM and ours with identical weights (loaded through state_dict, strict)."""
    torch.manual_seed(0)
    ref = nn.LSTM(*args, **kwargs)
    ours = LSTM(*args, **kwargs)
    assert sorted(ours.state_dict()) == sorted(ref.state_dict())
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _packed_reference(ref, x, lengths, hx=None):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, state = ref(packed, hx)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out, state


@pytest.mark.parametrize(
    "num_layers,bidirectional,bias", [(1, False, True), (2, True, True), (3, False, False)]
)
def test_matches_torch_without_lengths(num_layers, bidirectional, bias):
    ref, ours = _pair(5, 7, num_layers, bias=bias, batch_first=True,
                      bidirectional=bidirectional)
    x = torch.randn(3, 17, 5, generator=_gen(1))
    y, state = ours(x)
    y_ref, state_ref = ref(x)
    assert y.shape == (3, 17, 7 * (2 if bidirectional else 1))
    torch.testing.assert_close(y, y_ref, **FP32)
    torch.testing.assert_close(state[0], state_ref[0], **FP32)
    torch.testing.assert_close(state[1], state_ref[1], **FP32)


@pytest.mark.parametrize("num_layers,bidirectional", [(1, False), (2, True)])
def test_lengths_match_packed_sequence(num_layers, bidirectional):
    ref, ours = _pair(4, 6, num_layers, batch_first=True, bidirectional=bidirectional)
    t = 17
    lengths = torch.tensor([17, 1, 9, 3])
    x = torch.randn(4, t, 4, generator=_gen(2))
    # Garbage in padded steps must not matter.
    pad = torch.arange(t)[None, :] >= lengths[:, None]
    x = x.masked_fill(pad[..., None], 50.0)
    y, state = ours(x, lengths=lengths)
    y_ref, state_ref = _packed_reference(ref, x, lengths)
    torch.testing.assert_close(y, y_ref, **FP32)
    assert (y[pad] == 0).all()
    for s, s_ref in zip(state, state_ref, strict=True):
        torch.testing.assert_close(s, s_ref, **FP32)


def test_lstm_initial_state_and_lengths():
    ref, ours = _pair(3, 5, 2, batch_first=True, bidirectional=True)
    g = _gen(3)
    x = torch.randn(3, 6, 3, generator=g)
    h0 = torch.randn(4, 3, 5, generator=g)
    c0 = torch.randn(4, 3, 5, generator=g)
    lengths = torch.tensor([6, 2, 4])
    y, (h, c) = ours(x, (h0, c0), lengths=lengths)
    y_ref, (h_ref, c_ref) = _packed_reference(ref, x, lengths, (h0, c0))
    torch.testing.assert_close(y, y_ref, **FP32)
    torch.testing.assert_close(h, h_ref, **FP32)
    torch.testing.assert_close(c, c_ref, **FP32)


def test_initial_state_time_major_and_strided_input():
    ref, ours = _pair(4, 5, 2, batch_first=False, bidirectional=True)
    g = _gen(4)
    big = torch.randn(17, 3, 9, generator=g)
    x = big[:, :, ::2][..., :4]  # (T, B, C) strided
    assert not x.is_contiguous()
    hx = (torch.randn(4, 3, 5, generator=g), torch.randn(4, 3, 5, generator=g))
    y, (h, c) = ours(x, hx)
    y_ref, (h_ref, c_ref) = ref(x, hx)
    torch.testing.assert_close(y, y_ref, **FP32)
    torch.testing.assert_close(h, h_ref, **FP32)
    torch.testing.assert_close(c, c_ref, **FP32)


def test_streaming_in_chunks_equals_one_pass():
    """Carrying (h, c) across chunks is the same recurrence as one pass (a predictor's use)."""
    _, ours = _pair(4, 6, 2, batch_first=True)
    x = torch.randn(2, 17, 4, generator=_gen(5))
    y_full, (h_full, c_full) = ours(x)
    y1, state = ours(x[:, :7])
    y2, (h2, c2) = ours(x[:, 7:], state)
    torch.testing.assert_close(torch.cat([y1, y2], dim=1), y_full, **FP32)
    torch.testing.assert_close(h2, h_full, **FP32)
    torch.testing.assert_close(c2, c_full, **FP32)


def test_lstm_bf16_close_to_fp32_reference():
    ref, ours = _pair(8, 16, 1, batch_first=True)
    x = torch.randn(2, 17, 8, generator=_gen(6))
    lengths = torch.tensor([17, 5])
    y, (h, c) = ours.to(torch.bfloat16)(x.bfloat16(), lengths=lengths)
    assert y.dtype == torch.bfloat16
    y_ref, (h_ref, c_ref) = _packed_reference(ref, x, lengths)
    torch.testing.assert_close(y.float(), y_ref, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(h.float(), h_ref, atol=5e-2, rtol=5e-2)


def test_single_step_and_length_one():
    ref, ours = _pair(3, 4, 1, batch_first=True)
    x = torch.randn(5, 1, 3, generator=_gen(7))
    y, (h, c) = ours(x)
    y_ref, (h_ref, c_ref) = ref(x)
    torch.testing.assert_close(y, y_ref, **FP32)
    torch.testing.assert_close(h, h_ref, **FP32)
    torch.testing.assert_close(c, c_ref, **FP32)


def test_rejects_bad_arguments():
    lstm = LSTM(3, 4, 2)
    with pytest.raises(ValueError, match="initial state"):
        lstm(torch.randn(2, 5, 3), (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)))
    with pytest.raises(ValueError, match="features"):
        lstm(torch.randn(2, 5, 4))


def test_forward_routes_through_select_kernel(monkeypatch):
    seen = []

    def fake_select(op, *tensors, gap):
        seen.append((op, gap, tuple(tensors[0].shape)))
        return lambda x, h0, c0, lengths, weights, mode, dirs: (
            x, torch.zeros(len(weights), dirs), c0)

    patch_routing(monkeypatch, fake_select)
    lstm = LSTM(3, 4, 2, bidirectional=True, batch_first=False)
    x = torch.randn(5, 2, 3)  # (T, B, C): the kernel is handed (B, T, C)
    c0 = torch.randn(4, 2, 4)
    y, (h, c) = lstm(x, (torch.zeros(4, 2, 4), c0))
    torch.testing.assert_close(y, x)
    assert h.shape == (4, 2)  # one (w_ih, w_hh, b_ih, b_hh) per layer and direction
    assert c is c0
    assert seen == [("lstm", gaps.RNN.id, (2, 5, 3))]


@pytest.mark.parametrize("lengths", [None, [9, 3, 6, 1], [9, 0, 4, 2]])
@pytest.mark.parametrize(("layers", "bidirectional"), [(1, False), (2, True)])
def test_cpu_forward_is_the_fused_lstm_and_equals_the_step_loop(lengths, layers, bidirectional,
                                                                 monkeypatch):
    fused = torch._VF.lstm
    calls = []
    monkeypatch.setattr(torch._VF, "lstm", lambda *a: calls.append(1) or fused(*a))
    torch.manual_seed(0)
    lstm = LSTM(12, 8, num_layers=layers, bidirectional=bidirectional).eval()
    x = torch.randn(4, 9, 12)
    d = layers * (2 if bidirectional else 1)
    hx = (torch.randn(d, 4, 8), torch.randn(d, 4, 8))
    lens = None if lengths is None else torch.tensor(lengths)
    with torch.inference_mode():
        y, (h, c) = lstm(x, hx, lens)
        y0, (h0, c0) = lstm.forward_native(x, hx, lens)
    # The fused call served forward, except where a zero-length row cannot be packed.
    assert len(calls) == (0 if lengths is not None and 0 in lengths else 1)
    for a, b in ((y, y0), (h, h0), (c, c0)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    if lens is not None:  # padded steps stay zero, as packed sequences give them
        for row, n in enumerate(lengths):
            assert not y[row, n:].any()
