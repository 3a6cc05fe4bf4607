"""Who serves a call: an OASR kernel or torch, and why. The one decision every caller makes.

OASR targets GPU inference, so torch is not a silent safety net. Every routed call lands in
exactly one of these cases, each counted (``oasr.ops.counting``):

==================  =======================================================================
``kernel``          an OASR kernel serves it.
``out_of_scope``    outside the route's scope (CPU; for the layers also fp32/fp64): torch
                    serves it, logged once. Not debt: these paths let the CPU oracles run.
``gap``             in scope and no kernel serves it: a *declared* ``KernelGap`` lets torch
                    serve it, counted; an undeclared one raises. A kernel whose library cannot
                    be built here (no nvcc, nothing prebuilt) is the gap ``cuda-toolchain``.
``policy``          a kernel could serve it but is measured slower: torch serves it, counted
                    apart so it is never mistaken for a gap.
``torch_backend``   ``OASR_LAYERS_BACKEND=torch`` (or ``set_backend('torch')``) chose torch.
==================  =======================================================================

A caller holds a ``Route`` (``route(op, gap=...)``, one object per op) and asks it per call:
``route.select(x, *rest)`` returns the kernel's function or ``None`` for the torch path. The
static part (backend, the registered kernel, whether its library can be built) is resolved once
per route and re-resolved only after ``set_backend`` or a new registration; per call only the
scope (``x.is_cuda``, ``x.dtype``) and the kernel's own ``supports`` / ``prefer`` are read.

A kernel may be declared by ``"module:attr"`` strings (``oasr.kernels`` declares the in-tree
ones so): they are imported when a route first serves a call, so listing what is registered
(``oasr gaps``) imports no binding and no torch. This module imports torch only when a route
resolves for a call.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from oasr import envs
from oasr.ops import counting
from oasr.ops.build import BuildSpec, buildable
from oasr.ops.gaps import CUDA_TOOLCHAIN, KERNEL_GAPS, require_gap
from oasr.registry import import_target

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("oasr.ops")

__all__ = ["CUDA", "CUDA_HALF", "Kernel", "Route", "backend", "register_kernel",
           "registered_kernels", "route", "routes", "set_backend"]

CUDA_HALF = "cuda-half"  # the layers: CUDA fp16/bf16 is in scope
CUDA = "cuda"  # the frontends, the CTC search: any CUDA tensor is in scope
_SCOPES = (CUDA_HALF, CUDA)


@lru_cache(maxsize=1)
def _half_dtypes() -> tuple[torch.dtype, ...]:
    import torch

    return (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Kernel:
    """A compiled kernel serving op ``op``.

    ``fn`` takes the caller's arguments (the op's contract, in the module that routes it).
    ``native`` is its pure-torch oracle with the same signature, or ``None`` where the torch
    path needs the calling module (a layer's ``forward_native``). ``supports(*call)`` says
    whether the kernel can serve the call at all (else the route's gap); ``prefer(*call)``
    whether it *should* (``False``: measured slower, counted as policy). ``library`` is the
    build spec of the library ``fn`` runs (its unavailability is the gap ``cuda-toolchain``).
    Each of ``fn``, ``native``, ``supports``, ``prefer`` may be a lazy ``"module:attr"``
    string; ``load()`` returns the kernel with every one imported.
    """

    op: str
    fn: Callable[..., Any] | str
    source: str
    native: Callable[..., Any] | str | None = None
    library: BuildSpec | None = None
    supports: Callable[..., bool] | str | None = None
    prefer: Callable[..., bool] | str | None = None

    def load(self) -> Kernel:
        """This kernel with its lazy members imported (itself when none is lazy)."""
        lazy = {name: import_target(value) for name in ("fn", "native", "supports", "prefer")
                if isinstance(value := getattr(self, name), str)}
        return dataclasses.replace(self, **lazy) if lazy else self


_KERNELS: dict[str, Kernel] = {}
_ROUTES: dict[tuple[str, str, str], Route] = {}
_ROUTES_LOCK = threading.Lock()
_BACKEND: list[str | None] = [None]  # resolved lazily from the environment
_GENERATION = [0]  # bumped by set_backend / register_kernel: every route re-resolves


def _invalidate() -> None:
    _GENERATION[0] += 1


def register_kernel(kernel: Kernel) -> Kernel:
    if kernel.op in _KERNELS:
        raise ValueError(
            f"a kernel for op {kernel.op!r} is already registered ({_KERNELS[kernel.op].source})"
        )
    _KERNELS[kernel.op] = kernel
    _invalidate()
    return kernel


def registered_kernels() -> dict[str, Kernel]:
    return dict(_KERNELS)


def backend() -> str:
    if _BACKEND[0] is None:
        _BACKEND[0] = envs.layers_backend()
    return _BACKEND[0]  # type: ignore[return-value]


def set_backend(name: str | None) -> None:
    """Select ``'oasr'`` or ``'torch'`` for this process; ``None`` re-reads the environment.
    Every route re-resolves at its next call."""
    if name is not None and name not in ("oasr", "torch"):
        raise ValueError(f"unknown layers backend {name!r}; valid: oasr, torch")
    _BACKEND[0] = name
    _invalidate()


@dataclass(frozen=True)
class _Static:
    """A route's decision before it sees a call."""

    generation: int
    torch_backend: bool
    kernel: Kernel | None  # loaded (callable members) once a call resolved the route
    buildable: bool


class Route:
    """The routing of one op: ``select(x, *rest)`` -> the kernel's function or ``None``.

    Args:
        op: the op name (``"linear"``, ``"fbank"``, ...); the kernel registered under it serves.
        gap: the declared gap an in-scope call falls through when no kernel serves it.
        scope: ``CUDA_HALF`` (CUDA fp16/bf16, the layers) or ``CUDA`` (any CUDA tensor).
        provider: a module that registers ``op``'s kernel when imported; imported when the
            route first resolves (so a low module can route to a kernel binding above it).
    """

    def __init__(self, op: str, gap: str, scope: str = CUDA_HALF,
                 provider: str | None = None) -> None:
        if scope not in _SCOPES:
            raise ValueError(f"unknown scope {scope!r}; valid: {', '.join(_SCOPES)}")
        self.op, self.gap, self.scope, self.provider = op, gap, scope, provider
        self._static = _Static(-1, False, None, False)
        self._half: tuple[torch.dtype, ...] = ()  # set when the route first resolves for a call
        self._out_of_scope: dict[tuple[bool, torch.dtype], tuple[str, str]] = {}
        self._keys = {case: (case, op) for case in ("kernel", "policy", "torch_backend")}
        self._gap_key = ("gap", gap)
        self._toolchain_key = ("gap", CUDA_TOOLCHAIN.id)

    def _decide(self) -> _Static:
        """The static part of the decision, its kernel as declared (lazy members unloaded)."""
        generation = _GENERATION[0]
        if self.provider is not None and self.op not in _KERNELS:
            importlib.import_module(self.provider)
            generation = _GENERATION[0]
        kernel = _KERNELS.get(self.op)
        ok = kernel is not None and (kernel.library is None or buildable(kernel.library))
        return _Static(generation, backend() == "torch", kernel, ok)

    def resolve(self) -> _Static:
        """The static part of the decision with the kernel loaded to serve calls, cached until
        the next ``set_backend`` / registration."""
        st = self._static
        if st.generation == _GENERATION[0]:
            return st
        st = self._decide()
        if st.kernel is not None and not st.torch_backend:
            st = dataclasses.replace(st, kernel=st.kernel.load())
        self._half = _half_dtypes()
        self._static = st
        return st

    def static_case(self) -> str:
        """What an in-scope call the kernel supports would get, without a call: ``kernel``,
        ``torch_backend``, ``gap:<id>`` (no kernel, or its library unbuildable). Loads no
        lazy kernel member (imports no binding)."""
        st = self._static if self._static.generation == _GENERATION[0] else self._decide()
        if st.torch_backend:
            return "torch_backend"
        if st.kernel is None:
            return f"gap:{self.gap}"
        return "kernel" if st.buildable else f"gap:{CUDA_TOOLCHAIN.id}"

    def _scope_key(self, x: Any) -> tuple[str, str] | None:
        """``None`` when ``x`` is in scope, else its ``out_of_scope`` counter key."""
        cuda = x.is_cuda
        if cuda and (self.scope == CUDA or x.dtype in self._half):
            return None
        slot = (cuda, x.dtype)
        key = self._out_of_scope.get(slot)
        if key is None:
            reason = "cpu" if not cuda else str(x.dtype).replace("torch.", "")
            key = ("out_of_scope", f"{self.op}:{reason}")
            self._out_of_scope[slot] = key
            logger.info("oasr.ops: %s on %s is out of scope; torch serves it", self.op, reason)
        return key

    def select(self, x: Any, *rest: Any) -> Callable[..., Any] | None:
        """Route one call; ``x`` (a tensor) decides the scope, ``(x, *rest)`` is what the
        kernel's ``supports`` / ``prefer`` see.

        Raises:
            UndeclaredKernelGap: an in-scope call with no kernel and an undeclared gap.
        """
        st = self._static
        if st.generation != _GENERATION[0]:
            st = self.resolve()
        if st.torch_backend:
            counting.count(self._keys["torch_backend"])
            return None
        out = self._scope_key(x)
        if out is not None:
            counting.count(out)
            return None
        kernel = st.kernel
        if kernel is None or (kernel.supports is not None and not kernel.supports(x, *rest)):
            if self.gap not in KERNEL_GAPS:
                require_gap(self.gap, f"op {self.op!r} on {x.device} {x.dtype}")
            counting.count(self._gap_key)
            return None
        if not st.buildable:
            counting.count(self._toolchain_key)
            return None
        if kernel.prefer is not None and not kernel.prefer(x, *rest):
            counting.count(self._keys["policy"])
            return None
        counting.count(self._keys["kernel"])
        return kernel.fn


def route(op: str, gap: str, scope: str = CUDA_HALF, provider: str | None = None) -> Route:
    """The one ``Route`` of (op, gap, scope): created on first ask, shared after."""
    key = (op, gap, scope)
    r = _ROUTES.get(key)
    if r is None:
        with _ROUTES_LOCK:
            r = _ROUTES.setdefault(key, Route(op, gap, scope, provider))
    return r


def routes() -> list[Route]:
    """Every route asked for in this process."""
    return list(_ROUTES.values())
