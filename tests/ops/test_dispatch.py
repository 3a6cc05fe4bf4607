"""The routing decision: out of scope, declared gap, undeclared gap, toolchain, policy, kernel,
torch backend; the route's cached static part and its invalidation."""

from __future__ import annotations

import sys

import pytest
import torch

from oasr import ops
from oasr.ops import BuildSpec, Kernel, UndeclaredKernelGap, dispatch
from tests.ops.conftest import FakeCudaTensor

LIB = BuildSpec(name="test_lib", sources=("none.cu",), signatures={})


def _kernel(x, *rest):
    return "kernel"


def _register(**kw) -> Kernel:
    return ops.register_kernel(Kernel(op="test_op", fn=_kernel, source="tests", **kw))


@pytest.fixture
def gap():
    gap = ops.declare_gap(ops.KernelGap("test-gap", "no test kernel", "write it"))
    yield gap
    del ops.KERNEL_GAPS["test-gap"]


# (what is registered, the call, scope) -> (the case counted, its key, a kernel returned)
DECISIONS = [
    ("none", FakeCudaTensor(is_cuda=False, dtype=torch.float16), ops.CUDA_HALF,
     ("out_of_scope", "test_op:cpu"), False),
    ("kernel", FakeCudaTensor(dtype=torch.float32), ops.CUDA_HALF,
     ("out_of_scope", "test_op:float32"), False),
    ("kernel", FakeCudaTensor(dtype=torch.float32), ops.CUDA, ("kernel", "test_op"), True),
    ("none", FakeCudaTensor(), ops.CUDA_HALF, ("gap", "test-gap"), False),
    ("unsupported", FakeCudaTensor(), ops.CUDA_HALF, ("gap", "test-gap"), False),
    ("unbuildable", FakeCudaTensor(), ops.CUDA_HALF, ("gap", "cuda-toolchain"), False),
    ("slower", FakeCudaTensor(), ops.CUDA_HALF, ("policy", "test_op"), False),
    ("kernel", FakeCudaTensor(), ops.CUDA_HALF, ("kernel", "test_op"), True),
    ("kernel", FakeCudaTensor(dtype=torch.bfloat16), ops.CUDA_HALF, ("kernel", "test_op"), True),
]


@pytest.mark.parametrize(("registered", "call", "scope", "key", "served"), DECISIONS)
def test_decision_table(monkeypatch, gap, registered, call, scope, key, served):
    monkeypatch.setattr(dispatch, "buildable", lambda spec: registered != "unbuildable")
    if registered != "none":
        _register(library=LIB, supports=lambda x, n: registered != "unsupported",
                  prefer=lambda x, n: registered != "slower")
    route = ops.route("test_op", gap.id, scope=scope)
    fn = route.select(call, 3)
    assert (fn is _kernel) == served
    assert ops.gap_counts() == {key: 1}


def test_torch_backend_counts_every_call_and_skips_scope_and_gaps():
    ops.set_backend("torch")
    route = ops.route("linear", "undeclared-anything")
    assert route.select(FakeCudaTensor()) is None
    assert route.select(torch.zeros(1)) is None
    assert ops.gap_counts() == {("torch_backend", "linear"): 2}


def test_undeclared_gap_raises_in_scope_only():
    route = ops.route("test_op", "undeclared-gap")
    assert route.select(torch.zeros(1)) is None  # out of scope: no gap needed
    with pytest.raises(UndeclaredKernelGap, match="'undeclared-gap' is not declared"):
        route.select(FakeCudaTensor(dtype=torch.bfloat16))


def test_out_of_scope_is_logged_once_per_key(caplog):
    caplog.set_level("INFO", logger="oasr.ops")
    route = ops.route("linear", "gemm")
    for _ in range(3):
        route.select(torch.randn(3))
    route.select(FakeCudaTensor(dtype=torch.float32))
    assert ops.gap_counts() == {("out_of_scope", "linear:cpu"): 3,
                                ("out_of_scope", "linear:float32"): 1}
    assert sum("out of scope" in r.message for r in caplog.records) == 2


def test_static_part_is_resolved_once_and_set_backend_invalidates_it(monkeypatch, gap):
    resolved = []
    monkeypatch.setattr(dispatch, "buildable", lambda spec: resolved.append(spec) or True)
    _register(library=LIB)
    route = ops.route("test_op", gap.id)
    for _ in range(5):
        assert route.select(FakeCudaTensor()) is _kernel
    assert len(resolved) == 1  # not once per call
    ops.set_backend("torch")
    assert route.select(FakeCudaTensor()) is None
    ops.set_backend("oasr")
    assert route.select(FakeCudaTensor()) is _kernel
    assert len(resolved) == 3
    assert ops.gap_counts() == {("kernel", "test_op"): 6, ("torch_backend", "test_op"): 1}


def test_a_kernel_registered_after_the_route_resolved_is_seen(gap):
    route = ops.route("test_op", gap.id)
    assert route.select(FakeCudaTensor()) is None
    _register()
    assert route.select(FakeCudaTensor()) is _kernel


def test_route_is_one_object_per_op_gap_and_scope():
    assert ops.route("linear", "gemm") is ops.route("linear", "gemm")
    assert ops.route("linear", "gemm") is not ops.route("linear", "gemm", scope=ops.CUDA)
    with pytest.raises(ValueError, match="unknown scope"):
        ops.Route("linear", "gemm", scope="tpu")


def test_provider_module_is_imported_when_the_route_first_resolves(monkeypatch, gap):
    monkeypatch.delitem(sys.modules, "tests.ops._kernel_provider", raising=False)
    route = ops.route("provided_op", gap.id, provider="tests.ops._kernel_provider")
    assert "tests.ops._kernel_provider" not in sys.modules  # not at route creation
    fn = route.select(FakeCudaTensor())
    assert fn is not None and fn(None) == "provided"
    assert route.static_case() == "kernel"


def test_a_kernel_declared_by_name_is_imported_only_to_serve_a_call(monkeypatch, gap):
    monkeypatch.delitem(sys.modules, "tests.ops._lazy_binding", raising=False)
    ops.register_kernel(Kernel(op="lazy_op", fn="tests.ops._lazy_binding:lazy_kernel",
                               supports="tests.ops._lazy_binding:supports", source="tests"))
    route = ops.route("lazy_op", gap.id)
    assert route.static_case() == "kernel"
    assert ops.registered_kernels()["lazy_op"].fn == "tests.ops._lazy_binding:lazy_kernel"
    assert "tests.ops._lazy_binding" not in sys.modules  # listing it imported nothing
    fn = route.select(FakeCudaTensor())
    from tests.ops import _lazy_binding

    assert fn is _lazy_binding.lazy_kernel
    assert route.select(FakeCudaTensor(dtype=torch.bfloat16)) is None  # its supports says no
    assert ops.gap_counts() == {("kernel", "lazy_op"): 1, ("gap", gap.id): 1}
    loaded = ops.registered_kernels()["lazy_op"].load()
    assert loaded.fn is _lazy_binding.lazy_kernel and loaded.supports is _lazy_binding.supports


def test_static_case_names_the_toolchain_gap(monkeypatch, gap):
    monkeypatch.setattr(dispatch, "buildable", lambda spec: False)
    _register(library=LIB)
    assert ops.route("test_op", gap.id).static_case() == "gap:cuda-toolchain"
    assert ops.route("other_op", gap.id).static_case() == "gap:test-gap"
    ops.set_backend("torch")
    assert ops.route("test_op", gap.id).static_case() == "torch_backend"


def test_register_twice_refuses():
    _register()
    with pytest.raises(ValueError, match="already registered"):
        _register()


def test_backend_env_refuses_auto(monkeypatch):
    monkeypatch.setenv("OASR_LAYERS_BACKEND", "auto")
    ops.set_backend(None)
    with pytest.raises(ValueError, match="there is no 'auto'"):
        ops.backend()
    with pytest.raises(ValueError, match="unknown layers backend"):
        ops.set_backend("auto")


def test_backend_env_selects_torch(monkeypatch):
    monkeypatch.setenv("OASR_LAYERS_BACKEND", "torch")
    ops.set_backend(None)
    assert ops.backend() == "torch"
