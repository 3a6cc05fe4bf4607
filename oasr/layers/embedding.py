"""Token embedding lookup: Embedding, and its tensor-parallel shaped alias.

``weight`` (num_embeddings, dim) keeps torch's name and layout, so ``torch.nn.Embedding``'s
state_dict loads unchanged.

Kernel contract (gap ``embedding``): op ``embedding`` takes ``fn(weight, ids) -> (..., dim)``
with ids an integer tensor of any shape. Routing sees ``(weight, ids)`` in that order: the
table, not the integer ids, decides device and dtype scope.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from oasr import ops
from oasr.ops import gaps


class Embedding(nn.Module):
    """``weight[ids]``. ids: (...,) integer -> (..., dim).

    ``padding_idx`` (negative counts from the end, as in torch) names the pad row, which is
    zero-initialised; inference never updates it, so it is otherwise an ordinary row.
    """

    op = "embedding"

    def __init__(
        self,
        num_embeddings: int,
        dim: int,
        padding_idx: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"padding_idx {padding_idx} is outside the table of {num_embeddings} rows"
                )
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = dim
        self.padding_idx = padding_idx
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].zero_()

    def forward_native(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight, self.padding_idx)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        kernel = ops.route(self.op, gaps.EMBEDDING.id).select(self.weight, ids)
        if kernel is not None:
            return kernel(self.weight, ids)
        return self.forward_native(ids)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


# Vocabulary-sharded under tensor parallelism (rows are the shard axis); single-device today,
# so the name marks the contract and the class is the same.
VocabParallelEmbedding = Embedding
