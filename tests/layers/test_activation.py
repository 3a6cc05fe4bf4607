"""Activations against formula-level float64 references, and their kernel routing."""

from __future__ import annotations

import math

import pytest
import torch

from oasr import ops
from oasr.layers.activation import (
    Gelu,
    Relu,
    Sigmoid,
    Swish,
    SwooshL,
    SwooshR,
    Tanh,
    glu,
    swoosh_l,
    swoosh_r,
)
from tests.helpers.routing import patch_routing


# Written from the definitions, in float64, independent of the layer code.
def _sigmoid64(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


def _softplus64(z: torch.Tensor) -> torch.Tensor:
    return torch.where(z > 30, z, torch.log(1.0 + torch.exp(torch.clamp(z, max=30))))


REFERENCES = {
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (
        1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))
    ),
    "relu": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
    "sigmoid": _sigmoid64,
    "swish": lambda x: x * _sigmoid64(x),
    "tanh": lambda x: 2.0 * _sigmoid64(2.0 * x) - 1.0,
    "swoosh_r": lambda x: _softplus64(x - 1.0) - 0.08 * x - 0.313261687,
    "swoosh_l": lambda x: _softplus64(x - 4.0) - 0.08 * x - 0.035,
}

MODULES = {
    "gelu": lambda: Gelu(),
    "gelu_tanh": lambda: Gelu(approximate="tanh"),
    "relu": Relu,
    "sigmoid": Sigmoid,
    "swish": Swish,
    "tanh": Tanh,
    "swoosh_r": SwooshR,
    "swoosh_l": SwooshL,
}

# (rtol, atol) against the float64 reference evaluated on the same (rounded) input.
TOLERANCES = {
    torch.float32: (1e-5, 1e-6),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (2e-3, 2e-3),
}


def _inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(17, 129, generator=g) * 6
    return [
        torch.randn(1, generator=g).to(dtype),
        (torch.randn(3, 17, generator=g) * 6).to(dtype),
        base.to(dtype).t(),  # transposed view
        base.to(dtype)[::2, 1::3],  # strided slice
    ]


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("name", list(MODULES))
def test_module_matches_formula(name, dtype):
    rtol, atol = TOLERANCES[dtype]
    layer = MODULES[name]()
    for x in _inputs(dtype):
        y = layer(x)
        assert y.dtype == dtype and y.shape == x.shape
        torch.testing.assert_close(y.double(), REFERENCES[name](x.double()), rtol=rtol, atol=atol)
        torch.testing.assert_close(layer.forward_native(x), y, rtol=0, atol=0)


@pytest.mark.parametrize("fn,name", [(swoosh_l, "swoosh_l"), (swoosh_r, "swoosh_r")])
def test_swoosh_functional_matches_module_and_is_stable_for_large_inputs(fn, name):
    x = torch.randn(3, 129) * 8
    assert torch.equal(fn(x), MODULES[name]()(x))
    big = torch.tensor([100.0, 1e4, -1e4])
    y = fn(big)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), REFERENCES[name](big.double()), rtol=1e-6, atol=1e-4)


def test_swoosh_r_passes_through_the_origin():
    # Its offset is log(1 + e^-1): the constant is right only if SwooshR(0) == 0.
    assert abs(swoosh_r(torch.zeros(1)).item()) < 1e-7
    assert abs(SwooshR()(torch.zeros(1, dtype=torch.float64)).item()) < 1e-9


@pytest.mark.parametrize("dtype", list(TOLERANCES))
@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_glu_matches_formula(dtype, dim):
    rtol, atol = TOLERANCES[dtype]
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(6, 34, 2 * 17, generator=g) * 4).to(dtype).transpose(0, 2)  # (34, 34, 6)
    a, b = x.double().chunk(2, dim=dim)
    expected = a * _sigmoid64(b)
    y = glu(x, dim)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), expected, rtol=rtol, atol=atol)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="valid: none, tanh"):
        Gelu(approximate="erf")


class _Recorder:
    """Stands in for ``select_kernel``: records the routing call, returns a fake kernel."""

    def __init__(self) -> None:
        self.routed: list[tuple[str, tuple[torch.Tensor, ...], str]] = []
        self.kernel_args: list[tuple[object, ...]] = []
        self.result = torch.full((2,), 42.0)

    def __call__(self, op, *tensors, gap):
        self.routed.append((op, tensors, gap))

        def kernel(*args):
            self.kernel_args.append(args)
            return self.result

        return kernel


@pytest.mark.parametrize("name", list(MODULES))
def test_modules_route_to_their_kernel_op(monkeypatch, name):
    rec = _Recorder()
    patch_routing(monkeypatch, rec)
    x = torch.randn(3, 5)
    assert MODULES[name]()(x) is rec.result
    assert [(op, gap) for op, _, gap in rec.routed] == [(name, "activation")]
    assert rec.routed[0][1][0] is x
    assert len(rec.kernel_args) == 1 and rec.kernel_args[0][0] is x
    assert len(rec.kernel_args[0]) == 1


def test_glu_and_functionals_route_with_their_arguments(monkeypatch):
    rec = _Recorder()
    patch_routing(monkeypatch, rec)
    x = torch.randn(4, 6)
    assert glu(x, 0) is rec.result and glu(x, 1) is rec.result
    assert swoosh_l(x) is rec.result and swoosh_r(x) is rec.result
    assert [op for op, _, _ in rec.routed] == ["glu", "glu", "swoosh_l", "swoosh_r"]
    assert [args[1:] for args in rec.kernel_args] == [(0,), (1,), (), ()]


def test_cpu_calls_are_counted_out_of_scope_and_torch_backend_apart():
    x = torch.randn(2, 4)
    Relu()(x)
    swoosh_l(x)
    swoosh_l(x)
    glu(x)
    counts = ops.gap_counts()
    assert counts[("out_of_scope", "relu:cpu")] == 1
    assert counts[("out_of_scope", "swoosh_l:cpu")] == 2
    assert counts[("out_of_scope", "glu:cpu")] == 1
    ops.set_backend("torch")
    swoosh_r(x)
    assert ops.gap_counts()[("torch_backend", "swoosh_r")] == 1
