"""CI: a non-editable install of OASR carries its CUDA sources, and without nvcc every kernel
path is the declared gap ``cuda-toolchain``; with nvcc (``--with-nvcc``) it compiles and loads
every library from the installed sources, their launcher tables checked.

Run from outside the repository (so ``import oasr`` is the installed copy), with
``OASR_NVCC=off`` for the first check.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def _fake_cuda():
    class FakeCuda:  # routing reads only these attributes in the frontends' and CTC's scope
        is_cuda = True

    return FakeCuda()


def check_sources() -> None:
    import oasr
    from oasr.ops import build

    package = Path(oasr.__file__).resolve().parent
    assert "site-packages" in package.parts, f"oasr imported from {package}, not an install"
    root = build.csrc_root()
    assert root.is_relative_to(package), root
    for spec in build.LIBRARIES.values():
        for src in spec.sources:
            assert (root / src).is_file(), root / src
    headers = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.cuh"))
    assert "common/signatures.cuh" in headers and "common/api.cuh" in headers, headers
    print(f"installed: {package}; kernel sources: {len(headers)} headers under {root}")


def check_no_nvcc() -> None:
    from oasr import ops
    from oasr.cache import paged_attention
    from oasr.engine.decode import ctc, dtw
    from oasr.features import kaldi, whisper_logmel
    from oasr.features.spec import FeatureConfig
    from oasr.ops import build

    assert os.environ.get("OASR_NVCC") == "off", "run this check with OASR_NVCC=off"
    assert not build.toolchain_available()
    routes = (kaldi._FBANK, kaldi._MFCC, whisper_logmel._WHISPER_LOGMEL, ctc._CTC_SEARCH,
              paged_attention._ROUTE, dtw._ROUTE)
    states = {r.op: r.static_case() for r in routes}
    assert set(states.values()) == {"gap:cuda-toolchain"}, states
    ops.reset_counts()
    assert kaldi._FBANK.select(_fake_cuda(), FeatureConfig("fbank")) is None
    assert ctc.cuda_search(_fake_cuda(), None, 0, 4, 1.0, 1) is None
    counts = ops.gap_counts()
    assert counts == {("gap", "cuda-toolchain"): 2}, counts
    print("without nvcc: " + ", ".join(f"{op} -> {s}" for op, s in states.items()))


def check_with_nvcc() -> None:
    from oasr.kernels import jit
    from oasr.ops import build

    with tempfile.TemporaryDirectory() as cache:
        os.environ["OASR_CACHE_DIR"] = cache
        os.environ.setdefault("OASR_CUDA_ARCH", "sm_90")
        for spec in build.LIBRARIES.values():
            lib = jit.load(spec)  # compiled from the installed sources, table checked
            assert all(getattr(lib, name).argtypes is not None for name in spec.signatures)
            print(f"with nvcc: {spec.name} built and loaded, {len(spec.signatures)} launchers "
                  "match their declarations")


def check_prebuilt(arch: str) -> None:
    from oasr.kernels import jit
    from oasr.ops import build

    for spec in build.LIBRARIES.values():
        lib = build.prebuilt_library(spec, arch)
        assert lib is not None, f"{spec.name}: no prebuilt library for {arch}"
        loaded = jit.load(spec, arch)  # the prebuilt one, its table checked
        assert jit._LOADED.get(lib) is loaded
        print(f"prebuilt: {lib.name} loaded, {len(spec.signatures)} launchers match")


if __name__ == "__main__":
    check_sources()
    if "--prebuilt" in sys.argv:
        check_prebuilt(sys.argv[sys.argv.index("--prebuilt") + 1])
    elif "--with-nvcc" in sys.argv:
        check_with_nvcc()
    else:
        check_no_nvcc()
