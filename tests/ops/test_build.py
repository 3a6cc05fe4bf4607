"""The build specs: sources shipped in the package, the exported launcher table checked against
the declarations, ``OASR_NVCC=off`` making every kernel path the gap ``cuda-toolchain``."""

from __future__ import annotations

import ctypes
import os
import subprocess

import pytest

from oasr.ops import build
from oasr.ops.build import LIBRARIES, BuildSpec, SignatureMismatch


def test_every_library_source_is_inside_the_package():
    import oasr

    root = build.csrc_root()
    assert root.is_relative_to(os.path.dirname(oasr.__file__))
    assert set(LIBRARIES) == {"features_cuda", "ctc_cuda", "paged_decode", "rnn_cuda",
                              "dtw_cuda", "transducer_cuda", "wfst_cuda", "quant_cuda"}
    for spec in LIBRARIES.values():
        for src in spec.sources:
            text = (root / src).read_text()
            assert f"OASR_EXPORT_SIGNATURES({spec.name}," in text
            for fn in spec.signatures:  # every declared launcher is in the exported table
                assert f"OASR_SIGNATURE({fn})" in text


def test_the_host_extension_is_built_from_the_same_tree():
    """One native tree: the extension's sources and includes all lie under oasr/csrc/."""
    from pathlib import Path

    repo = Path(build.__file__).resolve().parents[2]
    sources = build.HOST_EXTENSION.sources(repo)
    assert sources and all(s.startswith("oasr/csrc/host/") for s in sources)
    assert "oasr/csrc/host/python/module.cc" in sources
    assert all(d.startswith("oasr/csrc/") and (repo / d).is_dir()
               for d in build.HOST_EXTENSION.include_dirs)


def test_signature_table_parses_and_mismatches_are_named():
    spec = BuildSpec(name="t", sources=("x.cu",),
                     signatures={"a": ("ptr", "i32"), "b": (), "c": ("f32",)})
    exported = build.parse_signatures(build.format_signatures(spec.signatures))
    assert exported == {"a": ("ptr", "i32"), "b": (), "c": ("f32",)}
    build.check_signatures(spec, exported)
    wrong = build.parse_signatures("a:ptr,i64;b:;d:ptr;")
    with pytest.raises(SignatureMismatch) as err:
        build.check_signatures(spec, wrong)
    msg = str(err.value)
    assert "a: declared (ptr, i32) but the library takes (ptr, i64)" in msg
    assert "c is declared but not exported" in msg
    assert "d is exported but not declared" in msg


def test_unknown_parameter_codes_refuse():
    with pytest.raises(ValueError, match="unknown parameter codes"):
        BuildSpec(name="t", sources=(), signatures={"a": ("int",)})


def test_nvcc_off_makes_every_kernel_path_the_toolchain_gap(monkeypatch, real_registry, caplog):
    from oasr import ops
    from oasr.cache import paged_attention
    from oasr.engine.decode import ctc
    from oasr.features import kaldi, whisper_logmel

    monkeypatch.setenv("OASR_NVCC", "off")
    build.toolchain_available.cache_clear()
    try:
        with pytest.raises(build.KernelBuildError, match="OASR_NVCC=off"):
            build.find_nvcc()
        caplog.set_level("WARNING", logger="oasr.kernels")
        assert not build.toolchain_available() and not build.toolchain_available()
        assert sum("cuda-toolchain" in r.message for r in caplog.records) == 1  # warned once
        ops.set_backend("oasr")  # routes re-resolve
        routes = (kaldi._FBANK, kaldi._MFCC, whisper_logmel._WHISPER_LOGMEL, ctc._CTC_SEARCH,
                  paged_attention._ROUTE)
        states = {r.op: r.static_case() for r in routes}
        assert states == {op: "gap:cuda-toolchain" for op in
                          ("fbank", "mfcc", "whisper_logmel", "ctc_prefix_beam",
                           "paged_attention")}
    finally:
        monkeypatch.delenv("OASR_NVCC")
        build.toolchain_available.cache_clear()
        ops.set_backend(None)


def _nvcc():
    try:
        return build.find_nvcc()
    except build.KernelBuildError:
        return None


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("name", sorted(LIBRARIES))
def test_compiled_library_exports_the_declared_table(tmp_path, name, monkeypatch):
    """Compiles each library for sm_90 (no GPU needed) and reads its table back."""
    from oasr.kernels import jit

    spec = LIBRARIES[name]
    out = tmp_path / f"lib{name}.so"
    proc = subprocess.run(build.nvcc_command(spec, _nvcc(), "sm_90", out), capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lib = ctypes.CDLL(str(out))
    assert jit.exported_signatures(lib, spec) == dict(spec.signatures)
    jit._bind(lib, spec)  # sets the argtypes from the checked table
    fn = getattr(lib, next(iter(spec.signatures)))
    assert [t for t in fn.argtypes] == [jit.CTYPES[c] for c in next(iter(
        spec.signatures.values()))]
    drifted = BuildSpec(name=spec.name, sources=spec.sources,
                        signatures={**spec.signatures, next(iter(spec.signatures)): ("f64",)})
    with pytest.raises(SignatureMismatch, match=next(iter(spec.signatures))):
        jit._bind(lib, drifted)
