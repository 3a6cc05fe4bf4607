"""``-b``'s default: 16 on CPU; on CUDA 256 with 64 GiB free, halving with the free memory."""

from __future__ import annotations

import pytest

from oasr.transcribe.batch_size import batch_for_free_memory, default_batch_size


def test_cpu_keeps_sixteen():
    assert default_batch_size("cpu") == 16


@pytest.mark.parametrize(("free_gib", "batch"), [(139.0, 256), (64.0, 256), (63.9, 128),
                                                 (32.0, 128), (31.9, 64), (16.0, 64),
                                                 (15.9, 32), (8.0, 32), (7.9, 16), (0.5, 16)])
def test_cuda_batch_follows_the_free_memory(free_gib, batch):
    assert batch_for_free_memory(free_gib) == batch


@pytest.mark.gpu
def test_the_cuda_default_reads_the_device():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    assert default_batch_size("cuda") in (16, 32, 64, 128, 256)
