"""I/O error causes without the path they name (the message around them names it once)."""

from __future__ import annotations

import errno

import pyarrow.parquet as pq
import pytest

from oasr.io.os_reason import reason


def test_an_errno_gives_the_system_words_only(tmp_path) -> None:
    missing = tmp_path / "missing.parquet"
    with pytest.raises(OSError) as info:
        pq.read_schema(missing)
    assert str(missing) in str(info.value)  # pyarrow names it
    assert reason(info.value, missing) == "No such file or directory"
    assert reason(OSError(errno.ENOSPC, "disk", "/x")) == "No space left on device"


def test_a_message_without_errno_loses_the_path(tmp_path) -> None:
    with pytest.raises(OSError) as info:
        pq.read_schema(tmp_path)  # a folder
    assert str(tmp_path) not in reason(info.value, tmp_path)
    assert "directory" in reason(info.value, tmp_path)
