"""``oasr transcribe -b``'s default: rows per encoder batch for the device the run uses.

CPU: 16 (the engine is compute-bound there; larger batches only hold more audio).
CUDA: 64 rows when the device has at least ``CUDA_FREE_GIB_FOR_64`` GiB free, halved for each
halving of the free memory below that, never under 16. 64 is the engine's best batch on the
H200 with Whisper tiny.en (``oasr bench``: 2839 RTFx at 64, 2368 at 128, 2222 at 256; peak
memory 5.1 GB at 64), and the decoder's KV cache is budgeted separately, so the batch mostly
sizes the encoder's activations and the staged audio.
"""

from __future__ import annotations

CPU_BATCH = 16
CUDA_BATCH = 64
MIN_CUDA_BATCH = 16
CUDA_FREE_GIB_FOR_64 = 16.0


def default_batch_size(device: str) -> int:
    """The default ``-b`` on ``device`` (a resolved device: ``cpu``, ``cuda`` or ``cuda:N``)."""
    if not device.startswith("cuda"):
        return CPU_BATCH
    import torch

    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return batch_for_free_memory(free / 2**30)


def batch_for_free_memory(free_gib: float) -> int:
    """64 at ``CUDA_FREE_GIB_FOR_64`` GiB free or more, halving with the free memory, >= 16."""
    batch, need = CUDA_BATCH, CUDA_FREE_GIB_FOR_64
    while batch > MIN_CUDA_BATCH and free_gib < need:
        batch //= 2
        need /= 2
    return batch
