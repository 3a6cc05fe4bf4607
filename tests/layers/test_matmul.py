"""oasr.layers.matmul.bmm against an explicit float64 einsum."""

from __future__ import annotations

import pytest
import torch

from oasr.layers.matmul import bmm
from oasr.ops import gaps
from tests.helpers.routing import patch_routing


@pytest.mark.parametrize("n,m,k,p", [(1, 1, 1, 1), (3, 17, 5, 3), (2, 3, 17, 17)])
def test_bmm_matches_einsum(n, m, k, p):
    g = torch.Generator().manual_seed(n * 100 + m)
    a = torch.randn(n, m, k, generator=g)
    b = torch.randn(n, k, p, generator=g)
    expected = torch.einsum("nmk,nkp->nmp", a.double(), b.double())
    torch.testing.assert_close(bmm(a, b).double(), expected, atol=1e-5, rtol=1e-5)


def test_bmm_noncontiguous_and_bf16():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 8, 17, generator=g).transpose(1, 2)  # (3, 17, 8), strided
    b = torch.randn(3, 8, 5, generator=g)[:, :, ::2]  # (3, 8, 3), strided
    expected = torch.einsum("nmk,nkp->nmp", a.double(), b.double())
    torch.testing.assert_close(bmm(a, b).double(), expected, atol=1e-5, rtol=1e-5)
    y = bmm(a.bfloat16(), b.bfloat16())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), expected, atol=0.1, rtol=3e-2)


def test_bmm_rejects_mismatched_shapes():
    with pytest.raises(RuntimeError):
        bmm(torch.randn(2, 3, 4), torch.randn(2, 5, 6))


def test_bmm_routes_through_select_kernel(monkeypatch):
    seen = []

    def fake_select(op, *tensors, gap):
        seen.append((op, gap, len(tensors)))
        return lambda a, b: torch.zeros(1)

    patch_routing(monkeypatch, fake_select)
    assert bmm(torch.randn(1, 2, 2), torch.randn(1, 2, 2)).item() == 0
    assert seen == [("bmm", gaps.BMM.id, 2)]
