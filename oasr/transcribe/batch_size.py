"""``oasr transcribe -b``'s default: rows per encoder batch for the device the run uses.

CPU: 16 (the engine is compute-bound there; larger batches only hold more audio).
CUDA: 256 rows when the device has at least ``CUDA_FREE_GIB_FOR_MAX`` GiB free (four rows a free
GiB), halved for each halving of the free memory below that, never under 16. On an H100 the
whole ``oasr transcribe`` process over an hour of short rows without word timings ran 2,300
steady RTFx at 256 against 1,738 at 64, and 980 against 979 with them, in one run
(docs/benchmarks.md, ``results/gpu_transcribe_e2e_2026-12-06f.json``; the engine alone: 3,696
against 3,397; GPU peak memory 8.8 GB against 5.5 GB for tiny.en). The decoder's KV cache is
budgeted separately, so the batch mostly sizes the encoder's activations and the staged audio.
"""

from __future__ import annotations

CPU_BATCH = 16
CUDA_BATCH = 256
MIN_CUDA_BATCH = 16
CUDA_FREE_GIB_FOR_MAX = 64.0


def default_batch_size(device: str) -> int:
    """The default ``-b`` on ``device`` (a resolved device: ``cpu``, ``cuda`` or ``cuda:N``)."""
    if not device.startswith("cuda"):
        return CPU_BATCH
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return batch_for_free_memory(free / 2**30)


def batch_for_free_memory(free_gib: float) -> int:
    """256 at ``CUDA_FREE_GIB_FOR_MAX`` GiB free or more, halving with the free memory, >= 16."""
    batch, need = CUDA_BATCH, CUDA_FREE_GIB_FOR_MAX
    while batch > MIN_CUDA_BATCH and free_gib < need:
        batch //= 2
        need /= 2
    return batch
