"""The per-tick decode budget: a step cap and a wall-clock deadline, whichever binds first."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class StepBudget:
    """Call ``take()`` before every batched decoder step; stop when it returns ``False``."""

    max_steps: int
    deadline: float  # time.perf_counter() value
    taken: int = field(default=0)

    @classmethod
    def for_tick(cls, decode_steps_per_tick: int, max_tick_ms: float) -> StepBudget:
        return cls(decode_steps_per_tick, time.perf_counter() + max_tick_ms / 1000.0)

    @classmethod
    def unlimited(cls) -> StepBudget:
        return cls(1 << 62, float("inf"))

    def take(self) -> bool:
        # The first step of a tick is always granted, so a slow step cannot starve a tick.
        if self.taken >= self.max_steps or (self.taken and time.perf_counter() >= self.deadline):
            return False
        self.taken += 1
        return True
