"""``QuantizationSpec``: which method quantizes which layers, and how; the switch's spellings.

A spec is what ``EngineConfig.quantization`` names and what a pre-quantized bundle records
(native format v2, ``oasr convert --quantize``). It imports no torch, so option parsing stays
cheap.

Spellings: ``--quantization`` takes our method names (``int8``, ``int8-weight``, ``fp8``,
``none``); ``--compute-type`` takes faster-whisper's (``int8``, ``int8_float16``, ``float16``,
...), each naming a method *and* the float dtype around it (``parse_compute_type``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = [
    "ALGORITHM_NAMES",
    "COMPUTE_TYPES",
    "ComputeType",
    "METHOD_NAMES",
    "QuantizationSpec",
    "parse_compute_type",
    "parse_quantization",
    "resolve_switches",
]

# The built-in methods (oasr.quantization registers them); "none" turns quantization off.
METHOD_NAMES = ("int8", "int8-weight", "fp8")
ALGORITHM_NAMES = ("absmax", "smoothquant")
MODULE_TYPES = ("gemm", "conv")
OFF = "none"


@dataclass
class QuantizationSpec:
    """One quantization of one model.

    Fields:
        method: a registered ``QuantMethod`` (``int8``: int8 weights per output channel and
            dynamic int8 activations; ``int8-weight``: int8 weights dequantized on the fly;
            ``fp8``: e4m3 weights per output channel, dynamic per-token e4m3 activations).
        algorithm: the registered ``QuantAlgorithm`` preparing the weights: ``absmax`` (scales
            from each output channel's largest weight) or ``smoothquant`` (activation outliers
            moved into the weights per input channel, from calibration statistics).
        lane: the ``ScaledMMLane`` to run on; ``None``: the method's choice for the device.
        module_types: which quantizable kinds are selected (``gemm``, ``conv``).
        include / exclude: ``fnmatch`` patterns over module paths (``decoder.layers.*``); a
            layer is selected when a pattern of ``include`` matches and none of ``exclude``.
            ``exclude=None`` keeps the defaults (``selection.DEFAULT_KEEP``: output heads,
            CTC / joint / predictor projections).
        smoothing_alpha: SmoothQuant's migration strength (0: none, 1: all onto the weights).
        layers: the module paths a quantization actually served, filled when it is applied
            (a pre-quantized bundle records them, so loading does not redo the selection).
        calibration: what the statistics were collected on (a manifest and its rows), for
            an algorithm that calibrates; empty otherwise.
    """

    method: str
    algorithm: str = "absmax"
    lane: str | None = None
    module_types: tuple[str, ...] = ("gemm",)
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] | None = None
    smoothing_alpha: float = 0.5
    layers: tuple[str, ...] = field(default_factory=tuple)
    calibration: str = ""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field and the valid values."""
        if not self.method or self.method == OFF:
            raise ValueError("a QuantizationSpec needs a method (int8, int8-weight, fp8); "
                             "for no quantization pass no spec")
        if self.algorithm not in ALGORITHM_NAMES:
            raise ValueError(f"quantization algorithm {self.algorithm!r} is not one of "
                             f"{', '.join(ALGORITHM_NAMES)}")
        bad = [t for t in self.module_types if t not in MODULE_TYPES]
        if bad or not self.module_types:
            raise ValueError(f"module_types {list(self.module_types)}: each must be one of "
                             f"{', '.join(MODULE_TYPES)}")
        if not 0.0 <= self.smoothing_alpha <= 1.0:
            raise ValueError(f"smoothing_alpha must be in [0, 1], got {self.smoothing_alpha}")
        if not self.include:
            raise ValueError("include selects nothing: give at least one pattern ('*': all)")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("module_types", "include", "exclude", "layers"):
            if out[key] is not None:
                out[key] = list(out[key])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QuantizationSpec:
        """The spec a bundle recorded; ValueError naming an unknown field."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"quantization spec has unknown fields {unknown}; this oasr "
                             f"knows {sorted(known)} (upgrade oasr to read it)")
        kw = dict(data)
        for key in ("module_types", "include", "layers"):
            if key in kw:
                kw[key] = tuple(kw[key])
        if kw.get("exclude") is not None:
            kw["exclude"] = tuple(kw["exclude"])
        spec = cls(**kw)
        spec.validate()
        return spec

    def same_scheme(self, other: QuantizationSpec) -> bool:
        """Whether ``other`` asks for this quantization (method and lane; a lane of None
        takes any)."""
        return self.method == other.method and (other.lane is None or other.lane == self.lane)

    def __str__(self) -> str:
        lane = f", lane {self.lane}" if self.lane else ""
        served = f", {len(self.layers)} layers" if self.layers else ""
        return f"{self.method} ({self.algorithm}{lane}{served})"


def parse_quantization(value: str | QuantizationSpec | None) -> QuantizationSpec | None:
    """``--quantization`` / ``EngineConfig.quantization`` -> a spec, or None for ``none``.

    Raises:
        ValueError: an unknown name, listing the valid ones (and pointing faster-whisper's
            compute types at ``--compute-type``).
    """
    if value is None or isinstance(value, QuantizationSpec):
        if value is not None:
            value.validate()
        return value
    name = value.strip().lower()
    if name in ("", OFF):
        return None
    if name.replace("_", "-") in METHOD_NAMES:
        return QuantizationSpec(method=name.replace("_", "-"))
    hint = (f"; {value!r} is a compute type: pass it as --compute-type"
            if name in COMPUTE_TYPES else "")
    raise ValueError(f"unknown quantization {value!r}; valid: "
                     f"{', '.join((*METHOD_NAMES, OFF))}{hint}")


@dataclass(frozen=True)
class ComputeType:
    """What one of faster-whisper's ``compute_type`` names means here."""

    quantization: str  # a method name or "none"
    dtype: str  # the float dtype around it (an EngineConfig.dtype name)


# faster-whisper's (CTranslate2's) compute types -> (our method, the float dtype).
COMPUTE_TYPES: dict[str, ComputeType] = {
    "default": ComputeType(OFF, "auto"),
    "auto": ComputeType(OFF, "auto"),
    "float32": ComputeType(OFF, "fp32"),
    "float16": ComputeType(OFF, "fp16"),
    "bfloat16": ComputeType(OFF, "bf16"),
    "int8": ComputeType("int8", "fp32"),
    "int8_float32": ComputeType("int8", "fp32"),
    "int8_float16": ComputeType("int8", "fp16"),
    "int8_bfloat16": ComputeType("int8", "bf16"),
}
# Names CTranslate2 has and we refuse, with why.
_REFUSED_COMPUTE_TYPES = {
    "int16": "there is no int16 method; use int8 (or float32)",
}


def parse_compute_type(name: str) -> ComputeType:
    """faster-whisper's ``compute_type`` -> (quantization, dtype); ValueError listing the
    valid names."""
    key = name.strip().lower()
    if key in COMPUTE_TYPES:
        return COMPUTE_TYPES[key]
    if key in _REFUSED_COMPUTE_TYPES:
        raise ValueError(f"--compute-type {name}: {_REFUSED_COMPUTE_TYPES[key]}")
    raise ValueError(f"unknown --compute-type {name!r}; valid: {', '.join(COMPUTE_TYPES)}")


def resolve_switches(quantization: str | None, compute_type: str | None,
                     dtype: str = "auto") -> tuple[str, str]:
    """The (quantization, dtype) a run uses from ``--quantization``, ``--compute-type`` and
    ``--dtype``: what the CLI and ``oasr.load`` call.

    ``--compute-type`` is an alias: it may not contradict an explicit ``--quantization`` or
    ``--dtype`` (``auto`` contradicts nothing). Returns a method name or ``"none"``, and a
    dtype name.

    Raises:
        ValueError: an unknown name or a contradiction, naming both flags.
    """
    quant = OFF
    if quantization is not None:
        spec = parse_quantization(quantization)
        quant = spec.method if spec is not None else OFF
    if compute_type is None:
        return quant, dtype
    ct = parse_compute_type(compute_type)
    if quantization is not None and quant != ct.quantization:
        raise ValueError(f"--compute-type {compute_type} means quantization {ct.quantization}, "
                         f"but --quantization {quantization} was given: pass one of them")
    if dtype != "auto" and ct.dtype != "auto" and dtype != ct.dtype:
        raise ValueError(f"--compute-type {compute_type} means dtype {ct.dtype}, but --dtype "
                         f"{dtype} was given: pass one of them")
    return ct.quantization, ct.dtype if ct.dtype != "auto" else dtype
