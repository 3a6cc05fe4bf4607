"""What ``-o`` may name: never a device, FIFO or socket; an existing file only when OASR wrote
it (Parquet metadata, a sidecar, a subtitle index); never one of the inputs."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oasr.io import OutputError, OutputRow, OutputWriter, SubtitleWriter
from oasr.io.output_format import fsync_replace
from oasr.io.output_target import (
    FINALS,
    check_output_target,
    remove_previous_output,
    sidecar_path,
)


def char_device(tmp_path: Path) -> Path:
    """A character device to aim -o at: a node like /dev/null's made in ``tmp_path`` where
    the test may (root), else a link to /dev/null (followed like the device itself)."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        node.symlink_to("/dev/null")
    return node


def _written(path: Path, fmt: str) -> None:
    with OutputWriter(path, fmt, {"model": "m"}) as w:
        w.write(OutputRow(id="a", text="hello"))


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "txt", "srt"])
def test_fifo_device_and_socket_are_refused_naming_them(tmp_path: Path, fmt: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for target, what in ((fifo, "FIFO"), (char_device(tmp_path), "character device"),
                             (sock_path, "socket")):
            with pytest.raises(OutputError, match=f"{target} is a .*{what}"):
                check_output_target(target, fmt)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_writers_refuse_a_fifo_themselves(tmp_path: Path) -> None:
    fifo = tmp_path / "o.parquet"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="FIFO"):
        OutputWriter(fifo, "parquet")
    srt = tmp_path / "o.srt"
    os.mkfifo(srt)
    with pytest.raises(OutputError, match="FIFO"):
        SubtitleWriter(srt, "srt")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISFIFO(os.stat(srt).st_mode)


def test_the_last_rename_never_replaces_a_device_node(tmp_path: Path) -> None:
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        os.mkfifo(node)  # not root: a FIFO is the special file we may make
    tmp = tmp_path / "tmp"
    tmp.write_bytes(b"x")
    with pytest.raises(OutputError, match="not a regular file"):
        fsync_replace(tmp, node)
    assert not stat.S_ISREG(os.stat(node).st_mode)


def test_a_parquet_file_without_our_metadata_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "theirs.parquet"
    pq.write_table(pa.table({"id": ["a"], "audio": ["x.wav"]}), other)
    before = other.read_bytes()
    with pytest.raises(OutputError, match="theirs.parquet exists and is not an oasr output"):
        check_output_target(other, "parquet")
    with pytest.raises(OutputError, match="not an oasr output"):
        OutputWriter(other, "parquet")
    assert other.read_bytes() == before


def test_an_input_is_refused_even_when_it_is_our_output(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    _written(out, "parquet")
    check_output_target(out, "parquet")  # ours: resumable
    with pytest.raises(OutputError, match="is one of the inputs"):
        check_output_target(out, "parquet", inputs=[str(tmp_path / "*.parquet")])


@pytest.mark.parametrize(("fmt", "name"), [("txt", "notes.txt"), ("jsonl", "data.jsonl")])
def test_unrelated_text_files_are_refused_and_untouched(tmp_path: Path, fmt: str,
                                                        name: str) -> None:
    other = tmp_path / name
    other.write_text('{"id": "x", "text": "mine"}\n' if fmt == "jsonl" else "x\tmine\n")
    before = other.read_bytes()
    with pytest.raises(OutputError, match=f"{name} exists and is not an oasr output .*sidecar"):
        check_output_target(other, fmt)
    with pytest.raises(OutputError, match="not an oasr output"):
        OutputWriter(other, fmt)
    assert other.read_bytes() == before


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "txt"])
def test_our_outputs_are_recognised_and_resumed(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"o.{fmt}"
    _written(out, fmt)
    if fmt != "parquet":
        side = json.loads(sidecar_path(out).read_text())
        assert side["oasr_output"] == "transcripts" and side["model"] == "m"
    check_output_target(out, fmt)
    with OutputWriter(out, fmt, {"model": "m2"}) as w:
        assert w.done_ids() == {"a"}
        assert w.previous_metadata() == {"model": "m"}  # text outputs: from the sidecar
        w.write(OutputRow(id="b", text="more"))
    with pytest.raises(OutputError, match="is an oasr transcripts output, not stream-finals"):
        check_output_target(out, fmt, kind=FINALS)


def test_outputs_of_earlier_releases_are_still_ours(tmp_path: Path) -> None:
    out = tmp_path / "old.parquet"
    pq.write_table(pa.table({"id": ["a"], "error": [None]}).replace_schema_metadata(
        {"oasr_version": "0.1.0"}), out)
    check_output_target(out, "parquet")


def test_remove_previous_output_takes_parts_and_sidecar(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    _written(out, "jsonl")
    w = OutputWriter(out, "jsonl")
    w.write(OutputRow(id="b", text="t"))
    w.abort()  # leaves a part
    assert Path(f"{out}.parts").is_dir()
    removed = remove_previous_output(out, "jsonl")
    assert set(removed) == {out, sidecar_path(out), Path(f"{out}.parts")}
    assert not any(tmp_path.iterdir())


def test_subtitle_files_we_did_not_write_are_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "talk.srt"
    theirs.write_text("1\n00:00:00,000 --> 00:00:01,000\nmine\n")
    with pytest.raises(OutputError, match="talk.srt exists and is not named in"):
        check_output_target(theirs, "srt")
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "x.srt").write_text("mine")
    with pytest.raises(OutputError, match="holds x.srt, which oasr did not write"):
        check_output_target(folder, "srt")
    ours = tmp_path / "ours"
    with SubtitleWriter(ours, "srt") as w:
        w.write(OutputRow(id="u1", text="hi", duration=1.0))
    check_output_target(ours, "srt")  # every .srt there is in the index
    removed = remove_previous_output(ours, "srt")
    assert {p.name for p in removed} == {"u1.srt", ".oasr-subtitles.jsonl"}


def test_single_subtitle_file_overwrite_redoes_an_error_row(tmp_path: Path) -> None:
    one = tmp_path / "talk.srt"
    with SubtitleWriter(one, "srt") as w:
        w.write(OutputRow(id="u1", error="bad audio"))  # an error row writes no file
    assert SubtitleWriter(one, "srt").done_ids() == {"u1"}
    remove_previous_output(one, "srt")
    assert SubtitleWriter(one, "srt").done_ids() == set()
