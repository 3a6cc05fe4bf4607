"""A pre-quantized bundle (native format v2) from a float one: ``oasr convert --quantize``.

The float bundle is loaded in fp32 on the CPU, calibrated on real audio when the algorithm
needs it (SmoothQuant), quantized offline (no lane runs, so an fp8 bundle can be written on a
machine without an fp8 GPU) and written with its ``QuantizationSpec`` (the served layers
listed). Loading it runs no calibration (``oasr.quantization.checkpoint``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from oasr.quantization.apply import QuantizationReport, apply_quantization
from oasr.quantization.checkpoint import quantized_state_dict
from oasr.quantization.spec import QuantizationSpec

__all__ = ["write_quantized_bundle"]


def write_quantized_bundle(float_bundle: str | Path, dst: str | Path, spec: QuantizationSpec,
                           calibration: str | None = None, calibration_rows: int = 16,
                           overwrite: bool = False) -> QuantizationReport:
    """Quantize the float bundle at ``float_bundle`` into a v2 bundle at ``dst``.

    Args:
        calibration: a manifest of real speech (its first ``calibration_rows`` rows are
            transcribed by the float model to collect activation statistics); required by
            ``smoothquant``, refused by ``absmax`` (which would ignore it).

    Raises:
        ValueError: a spec the algorithm cannot run (no calibration for smoothquant), an
            already quantized source, an empty selection.
        BundleError: a destination that may not be replaced.
    """
    from oasr.models.bundle import read_bundle, write_bundle
    from oasr.models.loader import load_pretrained
    from oasr.quantization import QUANT_ALGORITHMS

    spec.validate()
    bundle = read_bundle(float_bundle)
    if bundle.quantization:
        raise ValueError(f"{float_bundle} is already quantized ({bundle.quantization}); "
                         "quantize the float checkpoint instead")
    algorithm = QUANT_ALGORITHMS.get(spec.algorithm)
    if algorithm.needs_calibration and calibration is None:
        raise ValueError(f"--algorithm {spec.algorithm} needs --calibration MANIFEST (real "
                         "speech the float model transcribes to measure its activations)")
    if not algorithm.needs_calibration and calibration is not None:
        raise ValueError(f"--algorithm {spec.algorithm} uses no calibration; drop "
                         "--calibration or use --algorithm smoothquant")
    loaded = load_pretrained(str(bundle.path))
    stats = None
    if calibration is not None:
        from oasr.quantization.calibration import calibrate

        stats = calibrate(loaded, calibration, calibration_rows)
        spec = dataclasses.replace(spec, calibration=stats.source)
    report = apply_quantization(loaded.model, spec, "cpu", stats=stats, offline=True)
    assert report is not None
    state = quantized_state_dict(loaded.model)
    write_bundle(dst, dataclasses.replace(bundle.record(), quantization=report.spec.to_dict()),
                 state, bundle.tokenizer_dir, overwrite=overwrite)
    return report
