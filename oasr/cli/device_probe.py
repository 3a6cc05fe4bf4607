"""The device ``oasr gaps`` reports, found without importing torch (which costs a listing ~1 s).

Two facts decide what ``torch.cuda`` would say: torch's build (its ``version.py``: the version
and the CUDA it was built against, ``None`` for a CPU build) and the CUDA driver's first visible
device (``oasr.kernels.cuda_driver``). A CPU build, no driver or no visible device is
``cuda: False`` with the reason.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from oasr.kernels.cuda_driver import first_device

__all__ = ["device_summary", "torch_build"]


def torch_build() -> tuple[str | None, str | None]:
    """(torch's version, the CUDA it was built with or ``None``), read from its files."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None, None
    values: dict[str, str | None] = {}
    for node in ast.parse(Path(spec.origin).with_name("version.py").read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in ("__version__", "cuda"):
            values[target.id] = ast.literal_eval(node.value)  # type: ignore[attr-defined]
    return values.get("__version__"), values.get("cuda")


def device_summary() -> dict[str, object]:
    """``{"cuda", "device", "torch"}`` plus ``capability`` and ``cuda_version`` (torch's build)
    on a GPU, or ``why`` not."""
    version, cuda = torch_build()
    if cuda is None:
        why = "torch is not installed" if version is None else "torch is a CPU build"
        return {"cuda": False, "device": "cpu", "torch": version, "why": why}
    found = first_device()
    if isinstance(found, str):
        return {"cuda": False, "device": "cpu", "torch": version, "why": found}
    return {"cuda": True, "device": found.name, "capability": found.arch, "torch": version,
            "cuda_version": cuda}
