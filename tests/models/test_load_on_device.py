"""``load_pretrained(device=...)``: weights read straight onto the accelerator equal the CPU
load moved there, and ties between parameters survive."""

from __future__ import annotations

import pytest
import torch

from oasr.models.loader import load_pretrained
from tests.helpers.real_tiny_en import needs_tiny_en


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@needs_tiny_en
def test_cuda_load_equals_the_cpu_load_moved():
    ref = load_pretrained().model.to("cuda")
    ours = load_pretrained(device="cuda").model
    want, got = ref.state_dict(), ours.state_dict()
    assert set(want) == set(got)
    for k, v in want.items():
        assert got[k].device.type == "cuda", k
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
    # buffers computed at construction (not in the state dict) moved too
    for (name, a), (_, b) in zip(ref.named_buffers(), ours.named_buffers()):
        assert b.device.type == "cuda" and torch.equal(a, b), name
    # a parameter shared by two modules is still one tensor: a broken tie would be one more
    assert len(list(ours.parameters())) == len(list(ref.parameters()))
