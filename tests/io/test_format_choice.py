"""-o's extension picks the format; -f contradicting it is an error."""

from __future__ import annotations

import pytest

from oasr.io.format_choice import infer_format
from oasr.io.writer import OutputError


@pytest.mark.parametrize("out,fmt", [("o.jsonl", "jsonl"), ("o.srt", "srt"), ("o.JSON", "json"),
                                     ("o.tsv", "tsv"), ("o.txt", "txt"), ("o.parquet", "parquet"),
                                     ("o.ndjson", "jsonl"), ("o.data", "parquet"),
                                     ("folder/", "parquet"), ("-", "jsonl")])
def test_extension_decides_without_format(out, fmt):
    assert infer_format(out, None) == fmt


def test_format_agreeing_or_on_a_folder_is_kept(tmp_path):
    assert infer_format("o.vtt", "vtt") == "vtt"
    assert infer_format(str(tmp_path), "srt") == "srt"
    assert infer_format("o.data", "txt") == "txt"


def test_contradiction_is_an_error():
    with pytest.raises(OutputError, match=r"ends with \.jsonl \(jsonl\) but --format is parquet"):
        infer_format("o.jsonl", "parquet")
    with pytest.raises(OutputError, match="streams JSONL"):
        infer_format("-", "srt")
    with pytest.raises(OutputError, match="unknown output format"):
        infer_format("o.jsonl", "csv")


def test_txt_into_a_folder_is_one_plain_text_file_per_recording(tmp_path):
    assert infer_format(str(tmp_path), "txt") == "txt-files"
    assert infer_format("out/", "txt") == "txt-files"
    assert infer_format("hyp.txt", "txt") == infer_format("hyp.txt", None) == "txt"
    assert infer_format(str(tmp_path), None) == "parquet"
    with pytest.raises(OutputError, match="unknown output format"):
        infer_format("o.txt", "txt-files")  # the folder layout is chosen, never named
