"""``rel_shift``'s strided view against its definition, element by element."""

from __future__ import annotations

import pytest
import torch

from oasr.models.zipformer.attention import rel_shift


def _by_definition(scores: torch.Tensor, length: int) -> torch.Tensor:
    h, b, t, _ = scores.shape
    out = torch.empty(h, b, t, length, dtype=scores.dtype)
    for i in range(t):
        for j in range(length):
            out[:, :, i, j] = scores[:, :, i, t - 1 - i + j]
    return out


@pytest.mark.parametrize("t,left", [(1, 0), (6, 0), (9, 0), (4, 8), (3, 5)])
def test_rel_shift_matches_definition(t: int, left: int) -> None:
    gen = torch.Generator().manual_seed(t * 31 + left)
    scores = torch.randn(2, 3, t, left + 2 * t - 1, generator=gen)
    assert torch.equal(rel_shift(scores, left + t), _by_definition(scores, left + t))


def test_rel_shift_of_a_non_contiguous_view() -> None:
    base = torch.randn(3, 2, 5, 9, generator=torch.Generator().manual_seed(0))
    scores = base.transpose(0, 1)  # (2, 3, 5, 9), strides not row-major
    assert torch.equal(rel_shift(scores, 5), _by_definition(scores.contiguous(), 5))


def test_rel_shift_refuses_a_length_past_its_positions() -> None:
    scores = torch.zeros(1, 1, 4, 7)  # T = 4 rows over 2T - 1 = 7 positions: length <= 4
    with pytest.raises(ValueError, match="needs at least 8 relative positions, got 7"):
        rel_shift(scores, 5)
