"""Embedding against a one-hot float64 reference and torch.nn.Embedding checkpoints."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oasr import ops
from oasr.layers.embedding import Embedding, VocabParallelEmbedding
from tests.helpers.routing import patch_routing


def _one_hot_lookup64(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # A lookup is a one-hot row times the table; exact in float64 (one nonzero per row).
    one_hot = torch.nn.functional.one_hot(ids.long(), weight.shape[0]).double()
    return one_hot @ weight.double()


def _ids(n: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(0, n, (1,), generator=g),
        torch.randint(0, n, (17,), generator=g),
        torch.randint(0, n, (3, 17), generator=g, dtype=torch.int32),
        torch.randint(0, n, (17, 3), generator=g).t(),  # transposed view
        torch.randint(0, n, (4, 34), generator=g)[:, ::2],  # strided slice
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,dim", [(1, 3), (3, 17), (17, 1), (129, 129)])
def test_lookup_matches_one_hot_reference(n, dim, dtype):
    emb = Embedding(n, dim, dtype=dtype)
    assert emb.weight.shape == (n, dim) and emb.weight.dtype == dtype
    for ids in _ids(n, seed=n * dim):
        y = emb(ids)
        assert y.shape == (*ids.shape, dim) and y.dtype == dtype
        assert torch.equal(y.double(), _one_hot_lookup64(ids, emb.weight))


@pytest.mark.parametrize("padding_idx", [None, 0, -1])
def test_loads_torch_state_dict_with_identical_output(padding_idx):
    ref = nn.Embedding(129, 17, padding_idx=padding_idx)
    ours = Embedding(129, 17, padding_idx=padding_idx)
    ours.load_state_dict(ref.state_dict())  # strict
    assert ours.padding_idx == ref.padding_idx
    for ids in _ids(129, seed=3):
        assert torch.equal(ours(ids), ref(ids))


def test_padding_row_is_zero_initialised_and_index_checked():
    emb = Embedding(5, 7, padding_idx=-2)
    assert emb.padding_idx == 3
    assert torch.count_nonzero(emb.weight[3]) == 0
    assert torch.count_nonzero(emb.weight[[0, 1, 2, 4]]) > 0
    with pytest.raises(ValueError, match="outside the table"):
        Embedding(5, 7, padding_idx=5)


def test_vocab_parallel_is_the_same_layer():
    assert VocabParallelEmbedding is Embedding


class _Recorder:
    def __init__(self) -> None:
        self.routed: list[tuple[str, tuple[torch.Tensor, ...], str]] = []
        self.kernel_args: list[tuple[object, ...]] = []

    def __call__(self, op, *tensors, gap):
        self.routed.append((op, tensors, gap))

        def kernel(*args):
            self.kernel_args.append(args)
            return "y"

        return kernel


def test_routes_table_first_so_the_table_decides_scope(monkeypatch):
    rec = _Recorder()
    patch_routing(monkeypatch, rec)
    emb = Embedding(9, 4)
    ids = torch.tensor([[1, 2]])
    assert emb(ids) == "y"
    (op, tensors, gap), = rec.routed
    assert (op, gap) == ("embedding", "embedding")
    assert tensors[0] is emb.weight and tensors[1] is ids
    assert rec.kernel_args[0][0] is emb.weight and rec.kernel_args[0][1] is ids


def test_cpu_call_is_counted_out_of_scope():
    Embedding(9, 4)(torch.tensor([1, 2]))
    assert ops.gap_counts() == {("out_of_scope", "embedding:cpu"): 1}
