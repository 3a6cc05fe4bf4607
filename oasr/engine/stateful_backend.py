"""The ``stateful`` streaming runtime: a list of state tensors per stream, batched per step.

For any encoder exposing the list API:
``get_streaming_init_states(batch_size, device) -> list[Tensor]`` and
``streaming_forward(x (B, T, F), x_lens (B,), states) -> (out (B, T', C), out_lens (B,),
new_states)``. A cohort's states are stacked along each tensor's batch axis
(``encoder.slot_state_specs[i].batch_dim`` when declared, else 0), or by the encoder's own
``stack_states`` / ``unstack_states`` when it has them. Nothing is captured; this runtime is the
slot runtime's parity oracle.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr.engine.streaming_backend import StreamingEncoderBackend

LIST_API = ("get_streaming_init_states", "streaming_forward")


def check_list_api(encoder: Any, kind: str) -> None:
    missing = [m for m in LIST_API if not callable(getattr(encoder, m, None))]
    if missing:
        raise ValueError(
            f"{type(encoder).__name__} declares streaming_kind={kind!r} but lacks "
            f"{', '.join(missing)}; the {kind} runtime drives the list-state API")


class StatefulStreamingBackend(StreamingEncoderBackend):
    def __init__(self, model: Any, device: torch.device | str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(model)
        check_list_api(self.encoder, "stateful")
        self.device = torch.device(device) if device is not None else None
        self.states: dict[int, list[torch.Tensor]] = {}
        specs = getattr(self.encoder, "slot_state_specs", None)
        self._batch_dims = [s.batch_dim for s in specs] if specs else None

    def allocate(self, stream_id: int) -> None:
        if stream_id in self.states:
            raise ValueError(f"stream {stream_id} is already allocated")
        self.states[stream_id] = list(
            self.encoder.get_streaming_init_states(batch_size=1, device=self.device))

    def free(self, stream_id: int) -> None:
        self.states.pop(stream_id, None)

    def _dims(self, n: int) -> list[int]:
        return self._batch_dims or [0] * n

    def stack(self, per_stream: list[list[torch.Tensor]]) -> list[torch.Tensor]:
        if hasattr(self.encoder, "stack_states"):
            return self.encoder.stack_states(per_stream)
        dims = self._dims(len(per_stream[0]))
        return [torch.cat([s[i] for s in per_stream], dim=d) for i, d in enumerate(dims)]

    def unstack(self, batched: list[torch.Tensor], n: int) -> list[list[torch.Tensor]]:
        if hasattr(self.encoder, "unstack_states"):
            return self.encoder.unstack_states(batched)
        dims = self._dims(len(batched))
        split = [t.split(1, dim=d) for t, d in zip(batched, dims)]
        return [[parts[b] for parts in split] for b in range(n)]

    def forward_step(self, stream_ids: list[int], chunks: torch.Tensor,
                     chunk_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        unknown = [i for i in stream_ids if i not in self.states]
        if unknown:
            raise KeyError(f"streams {unknown} were not allocated")
        if chunk_lens is None:
            chunk_lens = torch.full((len(stream_ids),), chunks.shape[1], dtype=torch.int64,
                                    device=chunks.device)
        states = self.stack([self.states[i] for i in stream_ids])
        out, out_lens, new = self.encoder.streaming_forward(chunks, chunk_lens, states)
        for i, s in zip(stream_ids, self.unstack(list(new), len(stream_ids))):
            self.states[i] = s
        return out, out_lens
