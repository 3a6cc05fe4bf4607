"""``load_torch_checkpoint``: tensors and plain values load; paths load as values; anything
naming code is refused as unsafe, and bytes that are no checkpoint are refused as such."""

from __future__ import annotations

import io
import os
import pathlib

import pytest
import torch

from oasr.models.safe_load import UnsafeCheckpointError, load_torch_checkpoint
from tests.models.hostile import rename_global


def _saved(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_an_icefall_training_checkpoint_with_paths_loads():
    ckpt = {"model": {"w": torch.arange(3.0)}, "exp_dir": pathlib.Path("/exp"),
            "lang_dir": pathlib.PurePosixPath("data/lang"), "num_heads": "4,4", "causal": True,
            "optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]}}
    got = load_torch_checkpoint(_saved(ckpt), name="epoch-30.pt")
    assert torch.equal(got["model"]["w"], ckpt["model"]["w"])
    assert got["exp_dir"] == pathlib.Path("/exp") and got["num_heads"] == "4,4"


@pytest.mark.parametrize("pickled_as", ["pathlib.WindowsPath", "pathlib._local.WindowsPath",
                                        "pathlib._local.PosixPath"])
def test_paths_saved_on_windows_or_python_3_13_load_as_pure_paths(pickled_as: str):
    kind = pathlib.PureWindowsPath if "Windows" in pickled_as else pathlib.PurePosixPath
    original = "pathlib.PureWindowsPath" if kind is pathlib.PureWindowsPath \
        else "pathlib.PurePosixPath"
    data = rename_global(_saved({"exp_dir": kind("C:/exp" if kind is pathlib.PureWindowsPath
                                                 else "/exp")}), original, pickled_as)
    got = load_torch_checkpoint(data, name="pretrained.pt")["exp_dir"]
    assert type(got) is kind


class _Call:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


@pytest.mark.parametrize("call, named", [((os.system, "true"), "posix.system"),
                                         ((eval, "1"), "eval"),
                                         ((pathlib.Path.unlink, pathlib.Path("/x")), "getattr")])
def test_a_pickle_naming_code_is_unsafe_and_says_what(call, named, tmp_path):
    path = tmp_path / "final.pt"
    path.write_bytes(_saved({"w": torch.zeros(1), "x": _Call(*call)}))
    with pytest.raises(UnsafeCheckpointError) as info:
        load_torch_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"{path} names {named}") and "Re-save its tensors" in message
    assert "\n" not in message


@pytest.mark.parametrize("data", [b"", b"hello\n" * 10, bytes(range(256)) * 3])
def test_bytes_that_are_no_checkpoint_are_not_called_unsafe(data: bytes):
    with pytest.raises(ValueError, match="model.pt is not a readable torch checkpoint") as info:
        load_torch_checkpoint(data, name="model.pt")
    assert not isinstance(info.value, UnsafeCheckpointError) and "\n" not in str(info.value)
