"""The stateful and slot streaming runtimes against a tiny causal encoder declared here:
chunk by chunk through either runtime == the encoder's offline chunk-masked forward."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr.engine.streaming_backend import STREAMING_BACKENDS, build_streaming_backend
from oasr.models.base import StreamingStateSpec

F, C, K, L, T = 6, 8, 3, 5, 4  # features, channels, conv kernel, left window, chunk frames


class TinyCausalEncoder(nn.Module):
    """proj -> causal depthwise conv (kernel K) -> attention over the own chunk plus the L frames
    before it -> out. States: the conv's last K-1 inputs, the window's K and V (L, B, C: batch on
    dim 1 to exercise the spec's batch_dim) and the window's validity (B, L)."""

    streaming_kind = "stateful"
    streaming_pad_value = 0.0
    slot_state_specs = [StreamingStateSpec((K - 1, C)), StreamingStateSpec((L, C), batch_dim=1),
                        StreamingStateSpec((L, C), batch_dim=1), StreamingStateSpec((L,))]

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(F, C)
        self.conv = nn.Conv1d(C, C, K, groups=C)
        self.qkv = nn.Linear(C, 3 * C)
        self.out = nn.Linear(C, C)

    def _conv(self, h: torch.Tensor) -> torch.Tensor:  # (B, K-1+T, C) -> (B, T, C)
        return self.conv(h.transpose(1, 2)).transpose(1, 2)

    def offline(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, F) -> (B, N, C), attention chunk-masked: frame t sees [c*T - L, (c+1)*T)."""
        h = self.proj(x)
        h = self._conv(torch.cat([h.new_zeros(h.shape[0], K - 1, C), h], dim=1))
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        n = x.shape[1]
        t = torch.arange(n, device=x.device)[:, None]
        j = torch.arange(n, device=x.device)[None, :]
        c0 = (t // T) * T
        mask = (j < c0 + T) & (j >= c0 - L)
        att = (q @ k.transpose(1, 2) / C**0.5).masked_fill(~mask, float("-inf"))
        return self.out(att.softmax(-1) @ v)

    def get_streaming_init_states(self, batch_size: int = 1, device=None):
        z = dict(device=device)
        return [torch.zeros(batch_size, K - 1, C, **z), torch.zeros(L, batch_size, C, **z),
                torch.zeros(L, batch_size, C, **z), torch.zeros(batch_size, L, **z)]

    def streaming_forward(self, x, x_lens, states):
        conv_cache, k_cache, v_cache, valid = states
        h = self.proj(x)
        hc = torch.cat([conv_cache, h], dim=1)
        h = self._conv(hc)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        keys = torch.cat([k_cache.transpose(0, 1), k], dim=1)  # (B, L + T, C)
        vals = torch.cat([v_cache.transpose(0, 1), v], dim=1)
        ok = torch.cat([valid > 0.5, x.new_ones(x.shape[:2], dtype=torch.bool)], 1)
        att = (q @ keys.transpose(1, 2) / C**0.5).masked_fill(~ok[:, None, :], float("-inf"))
        out = self.out(att.softmax(-1) @ vals)
        new = [hc[:, -(K - 1):], keys[:, -L:].transpose(0, 1), vals[:, -L:].transpose(0, 1),
               ok[:, -L:].float()]
        return out, x_lens, new


def _run(backend, feats: list[torch.Tensor], schedule: list[list[int]]) -> list[torch.Tensor]:
    """Feed stream s its next chunk whenever s is in the step's cohort."""
    outs = [[] for _ in feats]
    pos = [0] * len(feats)
    for s in range(len(feats)):
        backend.allocate(s)
    for cohort in schedule:
        cohort = [s for s in cohort if pos[s] < feats[s].shape[0]]
        if not cohort:
            continue
        chunks = torch.stack([feats[s][pos[s]:pos[s] + T] for s in cohort])
        out, lens = backend.forward_step(cohort, chunks)
        assert lens.tolist() == [T] * len(cohort)
        for row, s in enumerate(cohort):
            outs[s].append(out[row])
            pos[s] += T
    return [torch.cat(o) for o in outs]


def _feats():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(n * T, F, generator=g) for n in (5, 3, 7)]


SCHEDULE = [[0, 1, 2], [0, 2], [2], [0, 1, 2], [1, 0], [2, 0], [0, 1, 2]] * 3


@pytest.mark.parametrize("kind", ["stateful", "slot"])
def test_chunked_equals_offline_chunk_masked(kind: str) -> None:
    enc = TinyCausalEncoder()
    enc.streaming_kind = kind
    backend = build_streaming_backend(enc, max_streams=4)
    assert type(backend) is STREAMING_BACKENDS.get(kind)
    feats = _feats()
    with torch.no_grad():
        streamed = _run(backend, feats, SCHEDULE)
        for f, got in zip(feats, streamed):
            torch.testing.assert_close(got, enc.offline(f[None])[0], atol=1e-5, rtol=1e-5)


def test_slot_equals_stateful_and_reuses_zeroed_slots() -> None:
    enc = TinyCausalEncoder()
    enc.streaming_kind = "slot"
    slot = build_streaming_backend(enc, max_streams=3)  # widths pad to 1, 2, 4 (the lane)
    stateful = STREAMING_BACKENDS.get("stateful")(enc)
    feats = _feats()
    with torch.no_grad():
        a = _run(slot, feats, SCHEDULE)
        b = _run(stateful, feats, SCHEDULE)
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-6)
        slot.free(1)
        with pytest.raises(ValueError, match="already allocated"):
            slot.allocate(0)
        slot.allocate(9)  # takes the freed slot, zeroed: behaves as a fresh stream
        out, _ = slot.forward_step([9], feats[1][None, :T])
        torch.testing.assert_close(out[0], enc.offline(feats[1][None, :T])[0], atol=1e-5,
                                   rtol=1e-5)
        with pytest.raises(RuntimeError, match="slots are in use"):
            slot.allocate(10)


def test_declarations_are_checked() -> None:
    enc = TinyCausalEncoder()
    enc.streaming_kind = "none"
    with pytest.raises(ValueError, match="streaming_kind='none'"):
        build_streaming_backend(enc)
    enc.streaming_kind = "paged"
    with pytest.raises(ValueError, match="lacks: forward_chunk_paged"):
        build_streaming_backend(enc)

    class Paged(TinyCausalEncoder):
        def forward_chunk_paged(self, *args):
            return args

    paged = Paged()
    paged.streaming_kind = "paged"
    with pytest.raises(ValueError, match="lacks: output_lengths"):
        build_streaming_backend(paged)

    class NoApi(nn.Module):
        streaming_kind = "slot"
        slot_state_specs = ()

    with pytest.raises(ValueError, match="lacks: get_streaming_init_states"):
        build_streaming_backend(NoApi())
    enc.streaming_kind = "slot"
    enc.slot_state_specs = []
    with pytest.raises(ValueError, match="slot_state_specs"):
        build_streaming_backend(enc)


@pytest.mark.gpu
def test_slot_cuda_graphs_equal_eager() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    enc = TinyCausalEncoder().cuda()
    enc.streaming_kind = "slot"
    feats = [f.cuda() for f in _feats()]
    graphed = build_streaming_backend(enc, max_streams=4, device="cuda")
    eager = build_streaming_backend(enc, max_streams=4, device="cuda", use_cuda_graphs=False)
    assert graphed.use_cuda_graphs and not eager.use_cuda_graphs
    with torch.no_grad():
        a = _run(graphed, feats, SCHEDULE)
        b = _run(eager, feats, SCHEDULE)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    assert set(graphed._graphs) == {(w, (T, F)) for w in (1, 2, 4)}
