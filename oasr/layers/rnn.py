"""The recurrent layer: LSTM, with PyTorch's parameter names.

Parameters are named and shaped exactly as in nn.LSTM (``weight_ih_l{k}`` (4H, in),
``weight_hh_l{k}`` (4H, H), ``bias_ih_l{k}``, ``bias_hh_l{k}`` (4H,), with a ``_reverse``
suffix for the backward direction; gate order i, f, g, o), so its state_dict loads unchanged.

``forward_native`` is the recurrence written out step by step (one input GEMM per layer and
direction, then a loop over time), deliberately not torch's fused call: it is the
formula-level oracle a fused kernel is checked against. On the CPU (fp32, out of the kernels'
scope) ``forward`` runs torch's fused LSTM (``aten::lstm``, packed for ragged lengths), the
same formula with the time loop in C++: 4-5x the step loop for a detector's 128-wide
recurrence over a 30-s window.

Variable lengths follow packed-sequence semantics without packing: a padded step does not
advance the state, its output is zero, and each row's final state is the state at its own
length (for the backward direction: after step 0, having started at step ``len - 1``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from oasr import ops
from oasr.ops import gaps

__all__ = ["LSTM"]

_GATES = 4  # i, f, g, o
_KERNELS = "oasr.kernels.rnn_cuda"


def _route() -> ops.Route:
    # any CUDA dtype is in scope: recurrent detectors and predictors run fp32 on the GPU too
    return ops.route("lstm", gaps.RNN.id, scope=ops.CUDA, provider=_KERNELS)

Weights = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def _cell(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's nonlinearity. gates: (B, 4H) = x W_ih^T + b_ih + h W_hh^T + b_hh."""
    i, f, g, o = gates.chunk(4, dim=-1)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def _run_direction(
    x: torch.Tensor,
    weights: Weights,
    h: torch.Tensor,
    c: torch.Tensor,
    valid: torch.Tensor | None,
    reverse: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer, one direction. x: (B, T, in) -> out (B, T, H), final h (B, H), c (B, H)."""
    w_ih, w_hh, b_ih, b_hh = weights
    xw = F.linear(x, w_ih, b_ih)  # (B, T, 4H): the input half of every step in one GEMM
    if b_hh is not None:
        xw = xw + b_hh
    t_len = x.shape[1]
    ys: list[torch.Tensor] = [h] * t_len
    for t in (reversed(range(t_len)) if reverse else range(t_len)):
        h_new, c_new = _cell(xw[:, t] + F.linear(h, w_hh), c)
        if valid is None:
            h, c, ys[t] = h_new, c_new, h_new
        else:
            keep = valid[:, t, None]  # (B, 1): padded steps leave the state where it was
            h = torch.where(keep, h_new, h)
            c = torch.where(keep, c_new, c)
            ys[t] = h_new.masked_fill(~keep, 0.0)
    out = torch.stack(ys, dim=1) if t_len else x.new_zeros(x.shape[0], 0, h.shape[-1])
    return out, h, c


class LSTM(nn.Module):
    """Multi-layer, optionally bidirectional LSTM; nn.LSTM's parameters and return structure.

    x: (B, T, in) (or (T, B, in) with ``batch_first=False``); ``hx = (h0, c0)``, each
    (L*D, B, H); ``lengths`` (B,) int in [0, T]. Returns ``(output, (h_n, c_n))`` with output
    (B, T, D*H), zero at padded steps, and h_n/c_n (L*D, B, H) ordered layer-major.
    """

    mode = "lstm"  # the kernel contract's mode argument

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        bidirectional: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.bidirectional = bidirectional
        self.num_directions = 2 if bidirectional else 1
        g = _GATES * hidden_size
        self._weight_names: list[tuple[str, str, str | None, str | None]] = []
        for layer in range(num_layers):
            in_size = input_size if layer == 0 else hidden_size * self.num_directions
            for direction in range(self.num_directions):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                names = (f"weight_ih{sfx}", f"weight_hh{sfx}",
                         f"bias_ih{sfx}" if bias else None, f"bias_hh{sfx}" if bias else None)
                shapes = ((g, in_size), (g, hidden_size), (g,), (g,))
                for name, shape in zip(names, shapes, strict=True):
                    if name is not None:
                        p = torch.empty(shape, device=device, dtype=dtype)
                        self.register_parameter(name, nn.Parameter(p))
                self._weight_names.append(names)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    @property
    def all_weights(self) -> list[Weights]:
        """(w_ih, w_hh, b_ih, b_hh) per (layer, direction), layer-major as torch orders h_n."""
        return [
            tuple(None if n is None else getattr(self, n) for n in names)  # type: ignore[misc]
            for names in self._weight_names
        ]

    def _initial(self, x: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        shape = (self.num_layers * self.num_directions, x.shape[0], self.hidden_size)
        if state is None:
            return x.new_zeros(shape)
        if tuple(state.shape) != shape:
            raise ValueError(f"initial state has shape {tuple(state.shape)}, expected {shape}")
        return state

    def _run(
        self,
        x: torch.Tensor,
        h0: torch.Tensor,
        c0: torch.Tensor,
        lengths: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Batch-first torch path. x: (B, T, in) -> (B, T, D*H), h_n and c_n (L*D, B, H)."""
        valid = None
        if lengths is not None:
            steps = torch.arange(x.shape[1], device=x.device)
            valid = steps < lengths.to(x.device).reshape(-1, 1)  # (B, T)
        weights = self.all_weights
        layer_in = x
        h_n: list[torch.Tensor] = []
        c_n: list[torch.Tensor] = []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(self.num_directions):
                idx = layer * self.num_directions + direction
                out, h, c = _run_direction(layer_in, weights[idx], h0[idx], c0[idx], valid,
                                           reverse=direction == 1)
                outs.append(out)
                h_n.append(h)
                c_n.append(c)
            layer_in = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
        return layer_in, torch.stack(h_n), torch.stack(c_n)

    def _run_fused(
        self,
        x: torch.Tensor,
        h0: torch.Tensor,
        c0: torch.Tensor,
        lengths: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``_run`` through torch's fused LSTM: batch-first x (B, T, in). Ragged rows go
        packed (their state stops at their own length, their padded outputs are zero, as in
        ``_run``); a row of length 0 cannot be packed, so such a batch takes ``_run``."""
        flat = [w for ws in self.all_weights for w in ws if w is not None]
        args = (self.bias, self.num_layers, 0.0, False, self.bidirectional)
        if lengths is None:
            y, h, c = torch._VF.lstm(x, (h0, c0), flat, *args, True)
            return y, h, c
        lens = lengths.to("cpu", torch.int64)
        if x.shape[0] == 0 or int(lens.min()) <= 0:
            return self._run(x, h0, c0, lengths)
        packed = pack_padded_sequence(x, lens, batch_first=True, enforce_sorted=False)
        order = packed.sorted_indices
        data, h, c = torch._VF.lstm(packed.data, packed.batch_sizes,
                                    (h0.index_select(1, order), c0.index_select(1, order)),
                                    flat, *args)
        y, _ = pad_packed_sequence(PackedSequence(data, packed.batch_sizes, order,
                                                  packed.unsorted_indices),
                                   batch_first=True, total_length=x.shape[1])
        back = packed.unsorted_indices
        return y, h.index_select(1, back), c.index_select(1, back)

    def _forward(
        self,
        x: torch.Tensor,
        hx: tuple[torch.Tensor, torch.Tensor] | None,
        lengths: torch.Tensor | None,
        native: bool,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if not self.batch_first:
            x = x.transpose(0, 1)
        h0, c0 = (None, None) if hx is None else hx
        kernel = None
        if not native:
            kernel = _route().select(x, h0, c0, lengths, self.all_weights, self.mode,
                                     self.num_directions)
        if x.shape[-1] != self.input_size:
            raise ValueError(f"input has {x.shape[-1]} features, expected {self.input_size}")
        h0, c0 = self._initial(x, h0), self._initial(x, c0)
        if kernel is not None:
            y, h, c = kernel(x, h0, c0, lengths, self.all_weights, self.mode,
                             self.num_directions)
        elif not native and x.device.type == "cpu" and x.dtype == torch.float32:
            y, h, c = self._run_fused(x, h0, c0, lengths)
        else:
            y, h, c = self._run(x, h0, c0, lengths)
        if not self.batch_first:
            y = y.transpose(0, 1)
        return y, (h, c)

    def forward_native(
        self,
        x: torch.Tensor,
        hx: tuple[torch.Tensor, torch.Tensor] | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        return self._forward(x, hx, lengths, native=True)

    def forward(
        self,
        x: torch.Tensor,
        hx: tuple[torch.Tensor, torch.Tensor] | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        return self._forward(x, hx, lengths, native=False)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
            f"bias={self.bias}, batch_first={self.batch_first}, "
            f"bidirectional={self.bidirectional}"
        )
