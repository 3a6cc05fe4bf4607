"""Loading a kernel library: the prebuilt one for the target when installed (no nvcc needed),
its exported table checked; a library whose table drifted from its declarations refuses."""

from __future__ import annotations

import subprocess

import pytest

from oasr.kernels import jit
from oasr.ops import build
from oasr.ops.build import PAGED_DECODE, BuildSpec, SignatureMismatch


def _nvcc():
    try:
        return build.find_nvcc()
    except build.KernelBuildError:
        return None


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc (to make the prebuilt library)")
def test_a_prebuilt_library_loads_without_nvcc_and_is_checked(tmp_path, monkeypatch):
    pre = tmp_path / "prebuilt"
    pre.mkdir()
    lib_path = pre / "libpaged_decode-sm_90.so"
    subprocess.run(build.nvcc_command(PAGED_DECODE, _nvcc(), "sm_90", lib_path), check=True,
                   capture_output=True)
    monkeypatch.setattr(build, "prebuilt_dir", lambda: pre)
    monkeypatch.setenv("OASR_NVCC", "off")
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    build.toolchain_available.cache_clear()
    try:
        assert build.buildable(PAGED_DECODE)  # prebuilt, though nvcc is off
        assert jit.library_state(PAGED_DECODE).startswith("prebuilt")
        lib = jit.load(PAGED_DECODE, "sm_90")
        assert jit._LOADED[lib_path] is lib
        assert not (tmp_path / "cache").exists()  # nothing compiled
        drifted = BuildSpec(name="paged_decode", sources=PAGED_DECODE.sources,
                            signatures={"oasr_paged_decode_preload": (),
                                        "oasr_paged_decode": ("ptr", "i32", "i32", "ptr")})
        with pytest.raises(SignatureMismatch, match="oasr_paged_decode: declared"):
            jit._bind(lib, drifted)
        assert jit.library_state("ctc_cuda").startswith("not buildable here (gap cuda-toolchain)")
    finally:
        build.toolchain_available.cache_clear()


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc")
def test_the_transducer_library_compiles_and_exports_its_declared_table(tmp_path):
    # Compiles for sm_90 and loads (the table is plain C: no device needed); the launch itself
    # is tested on a GPU (tests/engine/decode/test_transducer_fused.py -m gpu).
    import ctypes

    lib_path = tmp_path / "libtransducer_cuda.so"
    jit.build(build.TRANSDUCER_CUDA, "sm_90", out=lib_path)
    try:
        lib = ctypes.CDLL(str(lib_path))
    except OSError as exc:  # no CUDA runtime library to link against at load time
        pytest.skip(f"cannot load a CUDA library here: {exc}")
    jit._bind(lib, build.TRANSDUCER_CUDA)
