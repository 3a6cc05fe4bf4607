"""Whisper's json and tsv layouts, one file per recording."""

from __future__ import annotations

import json

from oasr.io.transcript_documents import render_json, render_tsv, render_txt
from oasr.io.writer import OutputRow

WORDS = [{"word": "hello", "start": 0.5, "end": 0.9, "confidence": 0.91234},
         {"word": "world", "start": 31.0, "end": 31.4, "confidence": 0.5}]


def _long() -> OutputRow:
    return OutputRow(id="a", text="hello world", words=WORDS, duration=40.0, language="en",
                     segments=[{"start": 0.0, "end": 29.5, "text": "hello"},
                               {"start": 30.0, "end": 32.0000000001, "text": " world"}])


def test_json_is_whisper_shaped_with_words_in_their_segment():
    doc = json.loads(render_json(_long())[0])
    assert doc["text"] == "hello world" and doc["language"] == "en"
    assert [s["id"] for s in doc["segments"]] == [0, 1]
    assert doc["segments"][1] == {"id": 1, "start": 30.0, "end": 32.0, "text": "world",
                                  "words": [{"word": "world", "start": 31.0, "end": 31.4,
                                             "probability": 0.5}]}
    assert doc["segments"][0]["words"][0]["probability"] == 0.9123


def test_short_row_is_one_segment_over_its_duration():
    row = OutputRow(id="b", text=" hi", words=None, duration=2.5, language="en")
    doc = json.loads(render_json(row)[0])
    assert doc["segments"] == [{"id": 0, "start": 0.0, "end": 2.5, "text": "hi", "words": []}]


def test_tsv_is_start_end_in_milliseconds_and_text():
    text, timings = render_tsv(_long())
    assert text.splitlines() == ["start\tend\ttext", "0\t29500\thello", "30000\t32000\tworld"]
    assert timings == "segments"
    assert render_tsv(OutputRow(id="c", text="", duration=1.0))[0] == "start\tend\ttext\n"


def test_txt_is_whispers_plain_text_one_segment_a_line():
    assert render_txt(_long()) == ("hello\nworld\n", "segments")
    short = OutputRow(id="b", text=" just  this ", duration=2.0)
    assert render_txt(short) == ("just this\n", "text")
    assert render_txt(OutputRow(id="s", text="", duration=3.0)) == ("", "none")


def test_a_txt_folder_writes_each_recording_and_a_txt_file_keeps_the_id_table(tmp_path):
    from oasr.io.writer import open_writer

    with open_writer(tmp_path / "folder", "txt-files", {"m": "1"}) as w:
        w.write(OutputRow(id="a/1", text="hello there", duration=1.0))
        w.write(OutputRow(id="b", text=None, error="unreadable"))
        assert w.done_ids() == {"a/1", "b"}
    names = sorted(p.name for p in (tmp_path / "folder").iterdir())
    assert names == [".oasr-subtitles.jsonl", "a_1-" + names[1][4:]]
    assert (tmp_path / "folder" / names[1]).read_text() == "hello there\n"
    with open_writer(tmp_path / "hyp.txt", "txt", {"m": "1"}, rows=2) as w:
        w.write(OutputRow(id="a", text="one"))
        w.write(OutputRow(id="b", text="two"))
    assert (tmp_path / "hyp.txt").read_text() == "a\tone\nb\ttwo\n"
