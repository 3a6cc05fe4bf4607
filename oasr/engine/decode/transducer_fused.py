"""The transducer greedy search in one call, when the model declares the tensors it reads.

``TransducerPredictor.stateless_tensors()`` (a label-window embedding and grouped conv) and
``Joiner.additive_tensors()`` (``out(act(enc_proj + dec_proj))``, tanh or ReLU) let
``oasr/csrc/kernels/transducer/greedy_decode.cuh`` run the whole frame-synchronous search:
on the host through ``oasr._C.transducer`` (fp32, rows over threads), on CUDA as one launch
(op ``transducer_greedy`` of ``oasr.ops``: ``oasr.kernels.transducer_cuda``, one CTA per row).
Either returning ``None`` (an LSTM predictor, a non-additive joint) leaves the loop
(``transducer_search.greedy_search``), which is also the oracle. The encoder half of the joint
is one GEMM before the call.

The CUDA launch is routed like every kernel: ``OASR_LAYERS_BACKEND=torch``, a model whose
scratch exceeds shared memory (gap ``transducer-scratch``) or no toolchain (gap
``cuda-toolchain``) is counted and ``search`` returns ``None``, so the family's torch path (the
graphed loop, ``transducer_graph.DeviceGreedy``) serves. CPU tensors are out of the route's
scope (counted) and run the host executor.

A batch whose labels overflow the output buffer (``2 * frames + 32`` a row, or
``max_sym_per_frame * frames`` if smaller) returns ``None`` too: the caller re-decodes it with
the loop rather than truncating.
"""

from __future__ import annotations

from typing import Any

import torch

from oasr import ops
from oasr.engine.decode.transducer_search import TransducerHypothesis
from oasr.kernels.declarations import TRANSDUCER_SCRATCH
from oasr.kernels.transducer_args import FusedTensors, GreedyLimits

__all__ = ["FusedGreedy", "FusedTensors", "GreedyLimits", "fused_tensors"]

_ROUTE = ops.route("transducer_greedy", TRANSDUCER_SCRATCH.id, scope=ops.CUDA,
                   provider="oasr.kernels.transducer_cuda")


def fused_tensors(predictor: Any, joiner: Any) -> FusedTensors | None:
    """The declared tensors of a stateless predictor and an additive joiner, or ``None``."""
    pred = predictor.stateless_tensors()
    joint = joiner.additive_tensors()
    if pred is None or joint is None or joint.get("activation") not in ("tanh", "relu"):
        return None
    emb, conv = pred["embedding"], pred.get("conv")
    window = 1 if conv is None else conv.shape[2]
    if conv is not None and (conv.shape[0] != emb.shape[1] or emb.shape[1] % conv.shape[1]):
        return None
    if not 1 <= window <= 8:  # greedy_decode.cuh's kMaxContext
        return None
    groups = 1 if conv is None else emb.shape[1] // conv.shape[1]
    return FusedTensors(emb, conv, joint["decoder_proj"], joint.get("decoder_proj_bias"),
                        joint["output_weight"], joint.get("output_bias"), groups,
                        joint["activation"] == "relu", int(predictor.blank_id))


class FusedGreedy:
    """``search(hidden, lengths, max_sym)`` -> hypotheses, or ``None`` on an overflow."""

    def __init__(self, predictor: Any, joiner: Any, unk_id: int | None,
                 num_threads: int | None = None) -> None:
        self.joiner = joiner
        self.tensors = fused_tensors(predictor, joiner)
        self.unk = None if self.tensors is None else (
            self.tensors.blank if unk_id is None else int(unk_id))
        self.num_threads = num_threads or torch.get_num_threads()
        self._cast: dict[tuple[torch.dtype, torch.device], FusedTensors] = {}

    @property
    def declared(self) -> bool:
        return self.tensors is not None

    def supports(self, hidden: torch.Tensor) -> bool:
        """Whether a call on ``hidden`` would take the fused path (counting nothing): declared
        tensors, and on CUDA the route's kernel, its library buildable and the call within its
        ``supports``."""
        if self.tensors is None:
            return False
        if not hidden.is_cuda:
            return True
        if _ROUTE.static_case() != "kernel":
            return False
        from oasr.kernels import transducer_cuda

        return transducer_cuda.route_supports(hidden, self.tensors)

    def _weights(self, dtype: torch.dtype, device: torch.device) -> FusedTensors:
        key = (dtype, device)
        if key not in self._cast:  # weights are fixed at inference: cast once per placement
            self._cast[key] = self.tensors.cast(dtype, device)
        return self._cast[key]

    @torch.inference_mode()
    def search(self, hidden: torch.Tensor, lengths: torch.Tensor, max_sym: int
               ) -> list[TransducerHypothesis] | None:
        if self.tensors is None:
            raise ValueError("the model declares no stateless predictor / additive joiner "
                             "tensors; greedy runs the loop")
        if max_sym < 1:
            raise ValueError(f"max_sym_per_frame must be >= 1, got {max_sym}")
        B, T, _ = hidden.shape
        limits = GreedyLimits(self.unk, max_sym, min(2 * T, max_sym * T) + 32)
        cap = limits.cap
        kernel = _ROUTE.select(hidden, self.tensors)
        if kernel is None and hidden.is_cuda:
            return None  # counted by the route: the family's torch loop serves
        enc = self.joiner.project_encoder(hidden)
        if kernel is not None:
            out = kernel(enc, lengths, self._weights(enc.dtype, enc.device), limits)
            tokens, frames, probs, counts, scores = (t.cpu().numpy() for t in out)
        else:
            from oasr import _C

            w = self._weights(torch.float32, torch.device("cpu"))
            np_ = [None if t is None else t.numpy() for t in (
                w.embedding, w.conv, w.dec_w, w.dec_b, w.out_w, w.out_b)]
            tokens, frames, probs, counts, scores = _C.transducer.greedy_decode(
                enc.float().contiguous().numpy(), lengths.to(torch.int64).cpu().numpy(),
                *np_, w.groups, w.blank, self.unk, max_sym, w.relu, cap, self.num_threads)
        if (counts > cap).any():
            return None
        return [TransducerHypothesis(tokens[b, :n].tolist(), frames[b, :n].tolist(),
                                     float(scores[b]), probs[b, :n].tolist())
                for b, n in enumerate(counts.tolist())]
