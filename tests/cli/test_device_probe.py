"""The torch-free device probe of ``oasr gaps`` against torch itself."""

from __future__ import annotations

import pytest
import torch

from oasr.cli.device_probe import device_summary, torch_build


def test_torch_build_is_what_torch_reports():
    assert torch_build() == (torch.__version__, torch.version.cuda)


def test_summary_agrees_with_torch_cuda():
    summary = device_summary()
    assert summary["cuda"] is torch.cuda.is_available()
    assert summary["torch"] == torch.__version__
    if not summary["cuda"]:
        assert summary["device"] == "cpu" and summary["why"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_driver_names_the_device_torch_uses():
    summary = device_summary()
    major, minor = torch.cuda.get_device_capability(0)
    assert summary["device"] == torch.cuda.get_device_name(0)
    assert summary["capability"] == f"sm_{major}{minor}"
    assert summary["cuda_version"] == torch.version.cuda
