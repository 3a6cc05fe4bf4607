"""``load_torchscript_tensors``: the tensors ``torch.jit.load(...).state_dict()`` gives, read
without compiling or running the archive's code; any other global, or a record that does not
match its tensor, is refused."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from oasr.models.safe_load import UnsafeCheckpointError
from oasr.models.torchscript_weights import load_torchscript_tensors


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv1d(1, 2, 3), nn.ReLU())
        self.cell = nn.LSTMCell(2, 2)
        self.register_buffer("basis", torch.randn(4, 3))
        self.rates = [8000, 16000]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(x)


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("jit") / "tiny.jit"
    torch.jit.save(torch.jit.script(_Tiny()), str(path))
    return path


def _rewrite(src: Path, dst: Path, edit) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data, kind = edit(item.filename, zin.read(item))
            zout.writestr(item.filename, data, compress_type=kind or item.compress_type)
    return dst


def test_the_tensors_equal_torch_jit_load(archive: Path):
    ours = load_torchscript_tensors(archive)
    ref = torch.jit.load(str(archive), map_location="cpu").state_dict()
    assert set(ref) <= set(ours)
    for key, value in ref.items():
        assert torch.equal(ours[key], value), key


def test_a_global_other_than_tensors_is_refused(archive: Path, tmp_path: Path):
    def edit(name, data):
        if name.endswith("/data.pkl"):
            data = data.replace(b"ctorch._utils\n_rebuild_tensor_v2\n", b"cposix\nsystem\n")
        return data, None

    bad = _rewrite(archive, tmp_path / "bad.jit", edit)
    with pytest.raises(UnsafeCheckpointError, match=f"{bad} names posix.system"):
        load_torchscript_tensors(bad)


@pytest.mark.parametrize("change", ["short", "deflated"])
def test_a_record_unlike_its_tensor_is_refused(change: str, archive: Path, tmp_path: Path):
    def edit(name, data):
        if name.endswith("/data/0"):
            if change == "short":
                return data[:-4], None
            return data, zipfile.ZIP_DEFLATED
        return data, None

    bad = _rewrite(archive, tmp_path / "bad.jit", edit)
    with pytest.raises(ValueError, match=r"record .*data/0 holds"):
        load_torchscript_tensors(bad)


def test_bytes_that_are_no_archive_are_one_line(tmp_path: Path):
    path = tmp_path / "silero_vad.jit"
    path.write_bytes(io.BytesIO(b"not a zip" * 10).getvalue())
    with pytest.raises(ValueError, match="is not a readable TorchScript archive") as info:
        load_torchscript_tensors(path)
    assert "\n" not in str(info.value)


def test_the_silero_detector_reads_a_hostile_archive_as_data(archive: Path, tmp_path: Path):
    from oasr.vad.silero import JIT, SileroVad

    def edit(name, data):
        if name.endswith("/data.pkl"):
            data = data.replace(b"ctorch._utils\n_rebuild_tensor_v2\n", b"cbuiltins\nexec\n")
        return data, None

    folder = tmp_path / "vad"
    folder.mkdir()
    _rewrite(archive, folder / JIT, edit)
    with pytest.raises(UnsafeCheckpointError, match="names builtins.exec"):
        SileroVad(folder).net(16000)
