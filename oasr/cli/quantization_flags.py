"""``--quantization`` and ``--compute-type``, as ``oasr transcribe`` and ``oasr stream`` both
declare them (the values are ``RunOptions.model`` fields, checked there)."""

from __future__ import annotations

import typer

__all__ = ["COMPUTE_TYPE", "QUANTIZATION"]

QUANTIZATION = typer.Option(
    "none", "--quantization", help="Quantize the model's GEMMs: int8 (CPU), int8-weight "
    "(weights only), fp8 (CUDA sm_89+) or none; a pre-quantized bundle brings its own "
    "(docs/quantization.md).")
COMPUTE_TYPE = typer.Option(
    None, "--compute-type", help="faster-whisper's names for --quantization with --dtype: "
    "int8, int8_float16, int8_bfloat16, float16, float32, ...")
