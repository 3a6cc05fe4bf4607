"""Stand in for the routing decision in a layer test: every ``Route.select`` calls ``fake``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oasr.ops.dispatch import Route


def patch_routing(monkeypatch: Any, fake: Callable[..., Any],
                  only: tuple[str, ...] | None = None) -> None:
    """A route's ``select(*call)`` becomes ``fake(op, *call, gap=gap)``: what a test sees is the
    op, the call and the gap the layer routed with; what ``fake`` returns is the kernel. With
    ``only``, the routes of other ops decide as before."""
    real = Route.select

    def select(self: Route, *call: Any) -> Any:
        if only is not None and self.op not in only:
            return real(self, *call)
        return fake(self.op, *call, gap=self.gap)

    monkeypatch.setattr(Route, "select", select)
