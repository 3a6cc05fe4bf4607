"""``rnn_recurrence``: the fused LSTM recurrence against the layer's torch path.

The oracle is ``LSTM.forward_native`` (the per-step formula loop) on the
same module: fp32 inputs must agree to float rounding over hundreds of steps, fp16/bf16 inputs
within their rounding (the kernel keeps the state in fp32, the torch path in the input dtype).
Variable lengths, reverse directions, stacked layers, initial states, hidden sizes from 1 to
1024 and an empty batch are covered.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import torch

from oasr import ops
from oasr.kernels import rnn_cuda
from oasr.layers.rnn import LSTM

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_registered_for_the_lstm_op() -> None:
    impl = ops.registered_kernels()["lstm"].load()
    assert impl.fn is rnn_cuda.recurrent_layers and impl.library.name == "rnn_cuda"
    lstm = LSTM(3, 4)
    call = (None, None, None, lstm.all_weights, "lstm", 1)
    assert not rnn_cuda.supports(torch.zeros(2, 5, 3), *call)  # CPU
    big = LSTM(3, 1025)
    assert not rnn_cuda.supports(torch.zeros(2, 5, 3), None, None, None, big.all_weights,
                                 "lstm", 1)


def test_transposed_weight_cache_follows_the_parameter() -> None:
    """The kernel's W_hh^T cache (device-independent): reused for the same parameter, redone
    after an in-place change, distinct per module, dropped with the parameter, and usable with
    inference tensors."""
    import gc

    a, b = LSTM(4, 8), LSTM(4, 8)
    wa = rnn_cuda._w_hh_t(a.weight_hh_l0)
    assert rnn_cuda._w_hh_t(a.weight_hh_l0) is wa
    torch.testing.assert_close(wa, a.weight_hh_l0.detach().t())
    torch.testing.assert_close(rnn_cuda._w_hh_t(b.weight_hh_l0), b.weight_hh_l0.detach().t())
    with torch.no_grad():
        a.weight_hh_l0.mul_(2.0)
    torch.testing.assert_close(rnn_cuda._w_hh_t(a.weight_hh_l0), a.weight_hh_l0.detach().t())
    n = len(rnn_cuda._W_CACHE)
    del a
    gc.collect()
    assert len(rnn_cuda._W_CACHE) == n - 1
    with torch.inference_mode():
        c = LSTM(4, 8)
        torch.testing.assert_close(rnn_cuda._w_hh_t(c.weight_hh_l0), c.weight_hh_l0.t())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_library_compiles_for_hopper(tmp_path, monkeypatch) -> None:
    from oasr.kernels import jit
    from oasr.ops.build import RNN_CUDA

    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("OASR_CUDA_ARCH", "sm_90")
    assert jit.build(RNN_CUDA).is_file()
    lib = jit.load(RNN_CUDA)
    assert len(lib.oasr_rnn_recurrence.argtypes) == 14


def _close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    tol = {torch.float32: (2e-5, 2e-5), torch.float16: (2e-2, 2e-2),
           torch.bfloat16: (8e-2, 8e-2)}[dtype]
    a, b = a.double(), b.double()
    torch.testing.assert_close(
        a, b, atol=tol[0], rtol=tol[1],
        msg=lambda m: f"{m}\nmax |diff| {(a - b).abs().max().item():.3g}, max |ref| "
                      f"{b.abs().max().item():.3g}")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("hidden,layers,bidir", [(128, 1, False), (37, 2, True),
                                                  (640, 1, False), (1024, 1, True), (1, 1, False)])
def test_kernel_matches_the_torch_loop_fp32(hidden, layers, bidir) -> None:
    torch.manual_seed(hidden + layers)
    mod = LSTM(24, hidden, layers, bidirectional=bidir).cuda()
    B, T = 5, 300
    x = torch.randn(B, T, 24, device="cuda")
    lengths = torch.tensor([T, 1, 0, 177, T - 1], device="cuda")
    d = 2 if bidir else 1
    h0 = torch.randn(layers * d, B, hidden, device="cuda")
    hx = (h0, torch.randn_like(h0))
    y, state = mod(x, hx, lengths)
    # the oracle in float64, so neither side's fp32 summation order (cuBLAS may split K)
    # decides the comparison
    ref = copy.deepcopy(mod).double()
    hx64 = tuple(t.double() for t in hx)
    y_ref, state_ref = ref.forward_native(x.double(), hx64, lengths)
    _close(y, y_ref, torch.float32)
    _close(state[0], state_ref[0], torch.float32)
    _close(state[1], state_ref[1], torch.float32)
    assert (y[1, 1:] == 0).all() and (y[2] == 0).all()  # padded steps are zero


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_kernel_half_inputs(dtype) -> None:
    torch.manual_seed(0)
    mod = LSTM(64, 128).cuda().to(dtype)
    x = torch.randn(3, 50, 64, device="cuda", dtype=dtype)
    y, (h, c) = mod(x)
    ref = LSTM(64, 128).cuda()
    ref.load_state_dict({k: v.float() for k, v in mod.state_dict().items()})
    y_ref, (h_ref, c_ref) = ref.forward_native(x.float())
    assert y.dtype == dtype
    _close(y, y_ref, dtype)
    _close(h, h_ref, dtype)


@pytest.mark.gpu
@needs_cuda
def test_kernel_serves_the_call_and_counts_it() -> None:
    from oasr.ops import counting

    mod = LSTM(16, 32).cuda()
    before = counting.snapshot()
    mod(torch.randn(2, 7, 16, device="cuda"))
    mod(torch.randn(0, 7, 16, device="cuda"))  # empty batch
    delta = counting.counts_since(before)
    assert delta.get(("kernel", "lstm"), 0) == 2, delta


@pytest.mark.gpu
@needs_cuda
def test_inference_mode_weights() -> None:
    with torch.inference_mode():
        mod = LSTM(8, 16).cuda()
        x = torch.randn(2, 9, 8, device="cuda")
        _close(mod(x)[0], mod.forward_native(x)[0], torch.float32)


@pytest.mark.gpu
@needs_cuda
def test_stepwise_calls_equal_one_call() -> None:
    """A decoder calling the layer one step at a time, carrying (h, c), equals one call."""
    torch.manual_seed(1)
    mod = LSTM(8, 64).cuda()
    x = torch.randn(4, 20, 8, device="cuda")
    y_all, (h_all, c_all) = mod(x)
    state = None
    ys = []
    for t in range(20):
        y, state = mod(x[:, t:t + 1], state)
        ys.append(y)
    _close(torch.cat(ys, 1), y_all, torch.float32)
    _close(state[0], h_all, torch.float32)


@pytest.mark.gpu
@needs_cuda
def test_new_weights_at_a_reused_address_are_not_served_stale() -> None:
    """A module freed and another allocated at the same address (the caching allocator reuses
    it) must be computed with its own weights, as must weights changed in place."""
    x = torch.randn(2, 30, 16, device="cuda")
    for seed in range(3):
        torch.manual_seed(seed)
        mod = LSTM(16, 32).cuda()
        _close(mod(x)[0], mod.forward_native(x)[0], torch.float32)
        with torch.no_grad():
            mod.weight_hh_l0.mul_(0.5)
        _close(mod(x)[0], mod.forward_native(x)[0], torch.float32)
        del mod
