"""``EngineConfig``: what the executor owns. Family knobs live in the family's options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Tokens an AR decode generates per request at most, unless the engine or the request lowers it
# (Whisper's 448 positions less its prompt leave room for 224, what openai-whisper samples).
DEFAULT_MAX_NEW_TOKENS = 224


@dataclass
class EngineConfig:
    """Engine-level configuration.

    Family-specific knobs do not belong here: they go in the family's options dataclass and
    arrive through ``decode_options`` (``--decode-option k=v``).
    """

    model: str = ""
    device: str = "auto"
    dtype: str = "auto"  # auto: fp16 on CUDA, fp32 on CPU
    decode_method: str | None = None  # None: the model's default family
    decode_options: dict[str, Any] = field(default_factory=dict)
    # Scheduling.
    max_batch_size: int = 16
    schedule_policy: str = "bucket"
    partition_policy: str = "count"
    max_offline_pad_ratio: float = 0.3
    max_batch_frames: int = 0  # frames partition: 0 = unbounded
    # The tick loop.
    decode_steps_per_tick: int = 32
    max_tick_ms: float = 200.0
    max_decode_slots: int = 256
    decode_admit_window_ms: float = 0.0
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    # One-shot families (CTC, transducers): pipeline the ticks, so a micro-batch's outputs are
    # built and handed out while the next micro-batch's encoder runs on the device (outputs
    # come one tick later: the first tick only queues an encoder).
    overlap_output_building: bool = True
    # CUDA: keep SDPA off cuDNN's backend (host-side plan building per shape; see ASREngine).
    avoid_cudnn_sdpa: bool = True
    # Decoder KV (AR families): where it lives and how much of it may be held.
    # kv_storage: "dense" (a buffer per decode group), "paged" (one BlockPool per engine, a
    # block table per row), "auto" (paged exactly when greedy decoder steps are replayed from
    # CUDA graphs: CUDA, the family's use_step_graphs on; dense otherwise; beams are dense).
    kv_storage: str = "auto"
    kv_block_size: int = 16  # positions per paged block
    # Decoder KV budget (self + cross attention) in GiB; rows past it wait for admission.
    # 0: none (dense), or (paged) a pool holding max_decode_slots rows, capped on CUDA at half
    # the device memory free when the engine is built.
    decode_kv_budget_gib: float = 0.0
    # Quantization (oasr.quantization): a method name (int8, int8-weight, fp8), "none", or a
    # QuantizationSpec; None: the checkpoint's recorded spec, if any, else float.
    quantization: Any = None

    def validate(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.decode_steps_per_tick < 1:
            raise ValueError("decode_steps_per_tick must be >= 1")
        if self.max_tick_ms <= 0:
            raise ValueError("max_tick_ms must be > 0")
        if self.max_decode_slots < 1:
            raise ValueError("max_decode_slots must be >= 1")
        if not 0.0 <= self.max_offline_pad_ratio:
            raise ValueError("max_offline_pad_ratio must be >= 0")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        from oasr.cache.kv_budget import KV_STORAGE_KINDS

        if self.kv_storage not in KV_STORAGE_KINDS:
            raise ValueError(f"kv_storage must be one of {', '.join(KV_STORAGE_KINDS)}, got "
                             f"{self.kv_storage!r}")
        if self.kv_block_size < 1:
            raise ValueError(f"kv_block_size must be >= 1, got {self.kv_block_size}")
        if self.decode_kv_budget_gib < 0:
            raise ValueError("decode_kv_budget_gib must be >= 0 (0: no budget)")
        from oasr.quantization.spec import parse_quantization

        parse_quantization(self.quantization)

    def resolve_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {self.device}: CUDA is not available on this machine")
        return self.device

    def resolve_dtype(self, device: str) -> Any:
        import torch

        from oasr.dtypes import dtype_from_name

        if self.dtype == "auto":
            return torch.float16 if device.startswith("cuda") else torch.float32
        return dtype_from_name(self.dtype, extra=("auto",))
