"""The ratchet: every registered architecture is built from ``oasr.layers`` only.

Two checks, on every architecture of ``list_models()`` built tiny on CPU (``tiny_configs``; an
architecture with no entry fails rather than going uncovered):

* structure: no submodule is a torch layer, or a subclass of one (``isinstance``, so a
  ``class MyLinear(nn.Linear)`` is caught too);
* calls: a trace of the aten ops issued while every decode-family surface runs
  (``exercise``) flags each GEMM or convolution not issued from inside ``oasr.layers`` (a
  module or a routed function): a bare ``torch.matmul`` / ``F.linear`` in model code skips
  routing, counting and the quantization hook.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from oasr.models.registry import list_models
from tests.models.tiny_configs import TINY_CONFIGS, build_tiny, uncovered

BARE_TORCH_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.LayerNorm,
    nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.Embedding, nn.LSTM, nn.GRU, nn.RNN,
    nn.AvgPool1d, nn.MultiheadAttention, nn.GELU, nn.ReLU, nn.SiLU, nn.Sigmoid, nn.Tanh,
    nn.GLU, nn.Softmax, nn.LogSoftmax,
)

_aten = torch.ops.aten
# The compute a kernel exists (or is owed) for: every GEMM form, and convolution.
ROUTED_OPS = frozenset({
    _aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm, _aten.mv, _aten.addmv, _aten.dot,
    _aten.vdot, _aten.convolution,
})


def bare_torch_layers(model: nn.Module) -> list[str]:
    """Names of the submodules that are (subclasses of) torch layers, not ``oasr.layers``."""
    return [
        f"{name or '<root>'}: {type(mod).__module__}.{type(mod).__name__}"
        for name, mod in model.named_modules()
        if isinstance(mod, BARE_TORCH_LAYERS)
    ]


class _BareCallTrace(TorchDispatchMode):
    """Records ``ROUTED_OPS`` calls whose Python stack has no ``oasr.layers`` frame, by the
    innermost ``oasr`` frame that issued them."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func.overloadpacket in ROUTED_OPS:
            site = None
            frame = sys._getframe(1)
            while frame is not None:
                module = frame.f_globals.get("__name__", "")
                if module.startswith("oasr.layers"):
                    site = None
                    break
                if site is None and module.startswith("oasr."):
                    site = f"{module}:{frame.f_lineno} ({frame.f_code.co_name})"
                frame = frame.f_back
            if site is not None:
                self.sites.append(f"{site}: aten.{func.overloadpacket.__name__}")
        return func(*args, **(kwargs or {}))


def bare_compute_calls(fn: Callable[[], Any]) -> list[str]:
    """Run ``fn`` and return each GEMM / convolution issued by oasr code outside the waist."""
    with torch.no_grad(), _BareCallTrace() as trace:
        fn()
    return sorted(set(trace.sites))


def test_every_registered_architecture_has_a_tiny_config():
    missing = uncovered([e.name for e in list_models()])
    assert not missing, f"add a tiny config to tests/models/tiny_configs.py for: {missing}"


@pytest.mark.parametrize("name", [e.name for e in list_models()])
def test_architecture_uses_only_the_layer_waist(name):
    model, exercise = build_tiny(name)
    bare = bare_torch_layers(model)
    assert not bare, f"{name} uses bare torch layers; build them from oasr.layers: {bare}"
    calls = bare_compute_calls(lambda: exercise(model))
    assert not calls, (f"{name} issues GEMMs / convolutions outside oasr.layers; route them "
                       f"through a layer or a routed function: {calls}")


def test_ratchet_flags_bare_layers_and_their_subclasses():
    from oasr.layers import BatchNorm1d, Linear

    class MyLinear(nn.Linear):
        pass

    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(2, 2)
            self.inner = nn.Sequential(nn.Conv1d(2, 2, 1), nn.GELU())
            self.sub = MyLinear(2, 2)
            self.bn = nn.BatchNorm1d(2)
            self.ok = Linear(2, 2)
            self.ok_bn = BatchNorm1d(2)

    found = bare_torch_layers(Bad())
    assert [f.split(":")[0] for f in found] == ["proj", "inner.0", "inner.1", "sub", "bn"]


def test_trace_flags_bare_gemms_in_model_code_and_passes_routed_ones():
    from oasr.layers import Linear
    from oasr.layers.matmul import bmm

    w = torch.randn(4, 3)
    routed = Linear(3, 4)
    x = torch.randn(2, 3)
    # Model code is any oasr module outside oasr.layers; pretend to be one.
    model_globals = {"__name__": "oasr.models.fake", "torch": torch, "F": F, "w": w, "x": x}
    bare_src = "def run():\n    torch.matmul(x, w.t())\n    F.linear(x, w)\n"
    exec(compile(bare_src, "fake.py", "exec"), model_globals)  # noqa: S102
    assert bare_compute_calls(model_globals["run"]) == [
        "oasr.models.fake:2 (run): aten.mm", "oasr.models.fake:3 (run): aten.mm",
    ]
    routed_globals = {"__name__": "oasr.models.fake", "routed": routed, "bmm": bmm, "x": x}
    ok_src = "def run():\n    routed(x)\n    bmm(x[None], x.t()[None])\n"
    exec(compile(ok_src, "fake.py", "exec"), routed_globals)  # noqa: S102
    assert bare_compute_calls(routed_globals["run"]) == []


def test_whisper_vocabulary_projection_is_routed_and_unchanged():
    """The tied projection goes through ``oasr.layers`` and equals ``x @ E^T`` exactly."""
    from oasr.layers import TiedLinear

    model, _ = build_tiny("whisper")
    dec = model.decoder
    assert isinstance(dec.proj_out, TiedLinear) and dec.proj_out.weight is dec.embed_tokens.weight
    assert "decoder.proj_out.weight" not in model.state_dict()  # one copy, the embedding's
    x = torch.randn(3, 5, dec.embed_tokens.weight.shape[1])
    with torch.no_grad():
        want = torch.matmul(dec.layer_norm(x), dec.embed_tokens.weight.t())
        assert torch.equal(dec._logits(x), want)


def test_ratchet_fails_for_an_architecture_with_no_tiny_config():
    assert uncovered(["whisper", "brand-new-arch"], TINY_CONFIGS) == ["brand-new-arch"]
