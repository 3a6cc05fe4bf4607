"""Subtitles: cue rules, SRT/WebVTT read back by independent parsers, the subtitle writer."""

from __future__ import annotations

import datetime
import functools
import html
import inspect
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oasr.io import subtitle_writer as sw_module
from oasr.io.subtitle_writer import (
    INDEX_NAME,
    SubtitleWriter,
    check_output_rows,
    subtitle_file_name,
)
from oasr.io.subtitles import TITLE_ABBREVIATIONS, Cue, CueOptions, build_cues, to_srt, to_vtt
from oasr.io.writer import OutputError, OutputRow, OutputWriter, open_writer, resolve_output_path

# Independent parsers (test extras); absent on a bare GPU image, where this file skips.
srt = pytest.importorskip("srt")
webvtt = pytest.importorskip("webvtt")

META = {"model": "whisper-tiny.en", "model_sha256": "abc"}


def _words(spec: list[tuple[str, float, float]]) -> list[dict]:
    return [{"word": w, "start": s, "end": e, "confidence": 0.9} for w, s, e in spec]


def _flow(texts: list[str], step: float = 0.3, length: float = 0.25) -> list[dict]:
    """Words one after another, ``step`` apart (no pause reaches the default gap)."""
    return _words([(t, i * step, i * step + length) for i, t in enumerate(texts)])


def _fits_oracle(texts: list[str], options: CueOptions) -> bool:
    """Brute force: can the words, single-spaced, be cut onto <= max_lines lines of
    <= max_chars? (Latin words only, so every join is one space.)"""
    n = len(texts)

    @functools.cache
    def ok(start: int, lines_left: int) -> bool:
        if start == n:
            return True
        if lines_left == 0:
            return False
        return any(
            len(" ".join(texts[start:stop])) <= options.max_chars and ok(stop, lines_left - 1)
            for stop in range(start + 1, n + 1)
        )

    return ok(0, options.max_lines)


# ----------------------------------------------------------------------- cue rules


def test_pause_cuts_a_cue_and_a_shorter_one_does_not() -> None:
    words = _words([("one", 0.0, 0.5), ("two", 1.1, 1.4), ("three", 1.999, 2.3)])
    cues = build_cues(words, CueOptions(min_gap_s=0.6))
    # 0.5 -> 1.1 is a 600 ms pause: cut; 1.4 -> 1.999 is 599 ms: no cut.
    assert [c.text for c in cues] == ["one", "two three"]
    assert (cues[0].start, cues[0].end) == (0.0, 0.5)
    assert (cues[1].start, cues[1].end) == (1.1, 2.3)


def test_sentence_ends_cut_after_the_word() -> None:
    words = _flow(["Hi.", "How", "are", "you?", '"Stop!"', "Wait…", "it's", "3.5", "now"])
    cues = build_cues(words)
    assert [c.text for c in cues] == ["Hi.", "How are you?", '"Stop!"', "Wait…", "it's 3.5 now"]
    # A title's full stop is no sentence end.
    cues = build_cues(_flow(["Margaret", "said", "Mr.", "Hale,", "and", "Dr.", "Who."]))
    assert [c.text for c in cues] == ["Margaret said Mr. Hale, and Dr. Who."]


def test_max_chars_wraps_onto_two_lines_then_cuts() -> None:
    opts = CueOptions(max_chars=20, max_lines=2, max_duration_s=100.0)
    texts = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"] * 2
    cues = build_cues(_flow(texts), opts)
    assert " ".join(" ".join(c.text.split()) for c in cues) == " ".join(texts)
    for k, cue in enumerate(cues):
        lines = cue.text.split("\n")
        assert 1 <= len(lines) <= 2 and all(len(line) <= 20 for line in lines)
        if len(" ".join(lines)) <= 20:
            assert len(lines) == 1  # no needless second line
        if k + 1 < len(cues):  # greedy: the next cue's first word would not have fitted
            assert not _fits_oracle(cue.text.split() + [cues[k + 1].text.split()[0]], opts)


def test_max_duration_cuts() -> None:
    cues = build_cues(_flow([f"w{i}" for i in range(40)], step=0.5, length=0.5),
                      CueOptions(max_duration_s=7.0))
    assert len(cues) > 1
    for cue in cues:
        assert cue.end - cue.start <= 7.0 + 1e-9
    # Each cut came only from duration: one more word would have passed 7 s.
    for a, b in zip(cues, cues[1:]):
        assert b.start + 0.5 - a.start > 7.0


def test_a_word_longer_than_a_line_or_the_duration_is_its_own_cue() -> None:
    long_word = "x" * 50
    cues = build_cues(_words([("a", 0, 0.2), (long_word, 0.3, 9.0), ("b", 9.1, 9.3)]))
    assert [c.text for c in cues] == ["a", long_word, "b"]


def test_cjk_words_join_without_spaces() -> None:
    def text(ws: list[str]) -> str:
        return build_cues(_flow(ws, step=0.1, length=0.1))[0].text

    assert text(["今", "天", "天", "气", "很", "好"]) == "今天天气很好"
    assert text(["我", "用", "Python", "写", "代", "码"]) == "我用 Python 写代码"
    assert text(["こ", "ん", "に", "ち", "は", "世", "界"]) == "こんにちは世界"
    assert text(["안", "녕"]) == "안녕"
    assert text(["你", "好", "，", "世", "界"]) == "你好，世界"
    assert text(["hello", "world"]) == "hello world"
    # The full stop ends the sentence, and so the cue.
    cues = build_cues(_flow(["你", "好", "。", "再", "见"], step=0.1, length=0.1))
    assert [c.text for c in cues] == ["你好。", "再见"]


def test_cjk_lines_wrap_between_characters() -> None:
    chars = list("一二三四五六七八九十") * 3
    cues = build_cues(_flow(chars, step=0.1, length=0.1), CueOptions(max_chars=8))
    assert "".join(c.text.replace("\n", "") for c in cues) == "".join(chars)
    for cue in cues:
        assert all(len(line) <= 8 for line in cue.text.split("\n"))
        assert " " not in cue.text


def test_times_are_whole_ms_ordered_and_never_overlap() -> None:
    # The sentence end cuts, but the next word starts before the previous one ended.
    words = _words([("Yes.", 0.00049, 1.2), ("No", 1.0, 1.0004), ("way", 1.0004, 0.9)])
    cues = build_cues(words)
    assert [c.text for c in cues] == ["Yes.", "No way"]
    assert cues[0].start == 0.0 and cues[0].end == 1.0  # pulled back to the next start
    assert cues[1].start == 1.0 and cues[1].end == 1.0  # an end before its start is raised
    assert build_cues([]) == [] and build_cues(_words([(" ", 0, 1)])) == []


def test_options_are_validated() -> None:
    for bad in ({"max_chars": 0}, {"max_lines": 0}, {"max_duration_s": 0.0},
                {"min_gap_s": -0.1}, {"max_duration_s": float("nan")}):
        with pytest.raises(ValueError):
            CueOptions(**bad)


def test_cli_defaults_match_cue_options() -> None:
    from oasr.cli.transcribe import transcribe_command

    params = inspect.signature(transcribe_command).parameters
    defaults = CueOptions()
    assert params["max_cue_chars"].default.default == defaults.max_chars
    assert params["max_cue_seconds"].default.default == defaults.max_duration_s
    assert params["cue_gap"].default.default == defaults.min_gap_s


_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=14)


@st.composite
def _word_streams(draw):
    texts = draw(st.lists(st.tuples(_WORD, st.booleans()), min_size=1, max_size=60))
    t, words = 0.0, []
    for text, stop in texts:
        t += draw(st.sampled_from([0.0, 0.05, 0.3, 0.59, 0.6, 1.5]))
        length = draw(st.sampled_from([0.05, 0.2, 0.6, 2.0, 8.0]))
        words.append({"word": text + ("." if stop else ""), "start": t, "end": t + length})
        t += length
    return words


def _stops(word: str) -> bool:
    return word.endswith(".") and word not in TITLE_ABBREVIATIONS


@settings(max_examples=150, deadline=None)
@given(words=_word_streams(), max_chars=st.integers(8, 50), max_lines=st.integers(1, 3))
def test_cue_rules_hold_for_any_word_stream(words, max_chars, max_lines) -> None:
    opts = CueOptions(max_chars=max_chars, max_lines=max_lines, max_duration_s=7.0,
                      min_gap_s=0.6)
    cues = build_cues(words, opts)
    # Every word once, in order, never split.
    assert [w for c in cues for w in c.text.split()] == [w["word"] for w in words]
    k = 0
    for n, cue in enumerate(cues):
        group = words[k : k + len(cue.text.split())]
        k += len(group)
        lines = cue.text.split("\n")
        if len(group) > 1:
            assert len(lines) <= max_lines and all(len(x) <= max_chars for x in lines)
            assert group[-1]["end"] - group[0]["start"] <= 7.0 + 1e-6
            for a, b in zip(group, group[1:]):
                assert round(b["start"] * 1000) - round(a["end"] * 1000) < 600
                assert not _stops(a["word"])
        assert abs(cue.start * 1000 - round(cue.start * 1000)) < 1e-6 and cue.end >= cue.start
        if n + 1 < len(cues):
            assert cue.end <= cues[n + 1].start
            nxt = words[k]
            reasons = (
                _stops(group[-1]["word"]),
                round(nxt["start"] * 1000) - round(group[-1]["end"] * 1000) >= 600,
                nxt["end"] - group[0]["start"] > 7.0 - 1e-6,
                not _fits_oracle([w["word"] for w in group] + [nxt["word"]], opts),
            )
            assert any(reasons), "a cut no rule asked for"


# ----------------------------------------------------------------------- formats


def _sample_cues() -> list[Cue]:
    words = _flow(["Tom", "&", "Jerry", "<3", "-->", "&lt;", "chase", "the", "mouse."]) + _words(
        [("Later", 3725.4996, 3726.0), ("on", 3726.1, 3726.2)]
    )
    return build_cues(words, CueOptions(max_chars=12))


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def test_srt_reads_back_with_the_srt_package() -> None:
    cues = _sample_cues()
    text = to_srt(cues)
    parsed = list(srt.parse(text))  # strict parser: raises on a malformed block
    assert [p.index for p in parsed] == list(range(1, len(cues) + 1))
    for p, cue in zip(parsed, cues):
        assert p.start == datetime.timedelta(milliseconds=_ms(cue.start))
        assert p.end == datetime.timedelta(milliseconds=_ms(cue.end))
        assert p.content == cue.text
    assert "01:02:05,500 --> 01:02:06,200" in text  # rounded to the millisecond
    assert to_srt([]) == "" and list(srt.parse(to_srt([]))) == []


def test_vtt_reads_back_with_webvtt_py() -> None:
    cues = _sample_cues()
    text = to_vtt(cues)
    assert text.startswith("WEBVTT\n\n")
    parsed = webvtt.from_string(text)
    assert len(parsed) == len(cues)
    for p, cue in zip(parsed, cues):
        for stamp, want in ((p.start_time, cue.start), (p.end_time, cue.end)):
            got = ((stamp.hours * 60 + stamp.minutes) * 60 + stamp.seconds) * 1000
            assert got + stamp.milliseconds == _ms(want)
        assert html.unescape(p.text) == cue.text  # & < > come back through the entities
    assert "01:02:05.500 --> 01:02:06.200" in text
    assert list(webvtt.from_string(to_vtt([]))) == []


@settings(max_examples=40, deadline=None)
@given(words=_word_streams())
def test_any_cues_round_trip_both_formats(words) -> None:
    cues = build_cues(words)
    from_srt = [(_ms(p.start.total_seconds()), _ms(p.end.total_seconds()), p.content)
                for p in srt.parse(to_srt(cues))]
    from_vtt = [(_ms(p.start_in_seconds + p.start_time.milliseconds / 1000),
                 _ms(p.end_in_seconds + p.end_time.milliseconds / 1000), p.text)
                for p in webvtt.from_string(to_vtt(cues))]
    want = [(_ms(c.start), _ms(c.end), c.text) for c in cues]
    assert from_srt == want and from_vtt == want


# ----------------------------------------------------------------------- the writer


def _ok(i: int, words: list[dict] | None = None) -> OutputRow:
    if words is None:
        words = _flow([f"word{i}", "and", "more."])
    return OutputRow(id=f"u{i}", text=" ".join(w["word"] for w in words), words=words,
                     duration=2.0)


def _err(i: int) -> OutputRow:
    return OutputRow(id=f"u{i}", error="decode failed: bad header")


def _index(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / INDEX_NAME).read_text().splitlines()]


def test_folder_mode_files_index_errors_and_silence(tmp_path: Path) -> None:
    out = tmp_path / "subs"
    with SubtitleWriter(out, "srt", META) as w:
        assert w.done_ids() == set() and w.previous_metadata() is None
        w.write(_ok(1))
        w.write(_err(2))
        w.write(_ok(3, words=[]))  # silent: a file with no cues
    assert sorted(p.name for p in out.iterdir()) == [INDEX_NAME, "u1.srt", "u3.srt"]
    parsed = list(srt.parse((out / "u1.srt").read_text(encoding="utf-8")))
    want = build_cues(_ok(1).words)
    assert [(p.start.total_seconds(), p.end.total_seconds(), p.content) for p in parsed] == [
        (c.start, c.end, c.text) for c in want
    ]
    assert (out / "u3.srt").read_text() == "" and list(srt.parse("")) == []
    index = _index(out)
    cue_meta = json.dumps({"max_chars": 42, "max_duration_s": 7.0, "max_lines": 2,
                           "min_gap_s": 0.6})
    assert index[0] == {"metadata": {**META, "cue_options": cue_meta}}
    assert {e["id"]: e["error"] for e in index[1:]} == {
        "u1": None, "u2": "decode failed: bad header", "u3": None}
    assert SubtitleWriter(out, "srt").done_ids() == {"u1", "u2", "u3"}
    assert SubtitleWriter(out, "srt", retry_errors=True).done_ids() == {"u1", "u3"}
    assert SubtitleWriter(out, "srt").previous_metadata() == {**META, "cue_options": cue_meta}


def test_resume_reruns_only_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "subs"
    with SubtitleWriter(out, "vtt", META) as w:
        for i in range(4):
            w.write(_ok(i))
    (out / "u2.vtt").unlink()  # a lost file is not done
    w2 = SubtitleWriter(out, "vtt", META, retry_errors=True)
    assert w2.done_ids() == {"u0", "u1", "u3"}
    w2.write(_ok(2))
    w2.write(_err(4))
    w2.close()
    assert SubtitleWriter(out, "vtt").done_ids() == {"u0", "u1", "u2", "u3", "u4"}
    w3 = SubtitleWriter(out, "vtt", retry_errors=True)
    assert w3.done_ids() == {"u0", "u1", "u2", "u3"}
    w3.write(_ok(4))  # the retried row succeeds: its newest entry wins
    w3.close()
    assert SubtitleWriter(out, "vtt", retry_errors=True).done_ids() == {f"u{i}" for i in range(5)}
    parsed = webvtt.from_string((out / "u4.vtt").read_text(encoding="utf-8"))
    assert [html.unescape(c.text) for c in parsed] == [c.text for c in build_cues(_ok(4).words)]


def test_a_failed_write_leaves_no_file_and_no_entry(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "subs"
    w = SubtitleWriter(out, "srt", META)
    w.write(_ok(1))

    def crash(tmp: Path, final: Path) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(sw_module, "fsync_replace", crash)
    with pytest.raises(OutputError, match=r"cannot write .*u2\.srt: disk full; kept: every "
                                          r"\.srt file finished before, recorded in"):
        w.write(_ok(2))
    with pytest.raises(OutputError, match="disk full"):  # that failure again, no new write
        w.write(_ok(3))
    w.abort()  # quiet: the failure was raised already
    assert sorted(p.name for p in out.iterdir()) == [INDEX_NAME, "u1.srt"]  # no tmp left
    assert SubtitleWriter(out, "srt").done_ids() == {"u1"}


def test_sigkill_keeps_finished_rows_and_a_torn_index_line_is_dropped(tmp_path: Path) -> None:
    out = tmp_path / "subs"
    script = (
        "import os, signal\n"
        "from oasr.io.subtitle_writer import SubtitleWriter\n"
        "from oasr.io.writer import OutputRow\n"
        f"w = SubtitleWriter({str(out)!r}, 'srt', {{}})\n"
        "for i in range(3):\n"
        "    w.write(OutputRow(id=f'u{i}', words=[{'word': 'hi', 'start': 0.0, 'end': 0.5}]))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    with open(out / INDEX_NAME, "ab") as f:
        f.write(b'{"id": "u9", "fi')  # a line a crash cut short
    w = SubtitleWriter(out, "srt")
    assert w.done_ids() == {"u0", "u1", "u2"}
    w.write(_ok(3))
    w.close()
    assert [e.get("id") for e in _index(out)] == [None, "u0", "u1", "u2", None, "u3"]
    assert SubtitleWriter(out, "srt").done_ids() == {"u0", "u1", "u2", "u3"}


def test_a_corrupt_index_line_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "subs"
    out.mkdir()
    (out / INDEX_NAME).write_text('{"id": "u1", "file": "u1.srt"}\nnot json\n')
    with pytest.raises(OutputError, match="line 2"):
        SubtitleWriter(out, "srt").done_ids()


def test_file_names_are_safe_and_unique(tmp_path: Path) -> None:
    ids = ["plain-id_1.a", "a/b", "a_b", "a b", "../up", ".hidden", "", "CON", "x" * 300,
           "Ab", "ab", "语音-1"]
    out = tmp_path / "subs"
    with SubtitleWriter(out, "srt") as w:
        for row_id in ids:
            w.write(OutputRow(id=row_id, words=_flow(["hi"])))
    names = {e["id"]: e["file"] for e in _index(out)[1:]}
    assert names["plain-id_1.a"] == "plain-id_1.a.srt" and names["a_b"] == "a_b.srt"
    assert names["语音-1"] == "语音-1.srt"
    assert len({n.casefold() for n in names.values()}) == len(ids)  # unique, even ignoring case
    for row_id, name in names.items():
        assert "/" not in name and not name.startswith(".") and len(name.encode()) < 255
        assert (out / name).is_file()
        assert name in (subtitle_file_name(row_id, "srt"),
                        subtitle_file_name(row_id, "srt", hashed=True))
    # The second of two names equal but for case takes the hashed form.
    assert names["Ab"] == "Ab.srt" and names["ab"] == subtitle_file_name("ab", "srt", hashed=True)
    assert SubtitleWriter(out, "srt").done_ids() == set(ids)


def test_single_file_mode(tmp_path: Path) -> None:
    target = tmp_path / "talk.srt"
    assert resolve_output_path(str(target), ["talk.wav"], "srt") == target
    with SubtitleWriter(target, "srt", META, rows=1) as w:
        w.write(_ok(7))
    assert sorted(p.name for p in tmp_path.iterdir()) == [INDEX_NAME, "talk.srt"]
    assert [p.content for p in srt.parse(target.read_text())] == [
        c.text for c in build_cues(_ok(7).words)]
    w2 = SubtitleWriter(target, "srt")
    assert w2.done_ids() == {"u7"}
    # The same folder seen as a folder of subtitles does not count talk.srt as u7's file.
    assert SubtitleWriter(tmp_path, "srt").done_ids() == set()
    w2.write(_ok(8))  # another recording into the same file replaces it
    with pytest.raises(OutputError, match="pass a folder"):
        w2.write(_ok(9))
    w2.abort()
    assert SubtitleWriter(target, "srt").done_ids() == {"u8"}


def test_several_rows_into_one_file_are_refused_up_front(tmp_path: Path) -> None:
    target = tmp_path / "talk.vtt"
    with pytest.raises(OutputError, match=r"3 recordings.*-o .*talk/"):
        check_output_rows(target, "vtt", 3)
    with pytest.raises(OutputError, match="pass a folder"):
        open_writer(target, "vtt", rows=2)
    check_output_rows(target, "vtt", 1)
    check_output_rows(target, "vtt", None)
    check_output_rows(tmp_path / "subs", "vtt", 3)  # a folder takes any number
    check_output_rows(tmp_path / "out.parquet", "parquet", 3)


def test_resolve_output_path_for_subtitles(tmp_path: Path) -> None:
    inputs = [str(tmp_path / "a.wav")]
    assert resolve_output_path(str(tmp_path / "subs"), inputs, "srt") == tmp_path / "subs"
    assert resolve_output_path(f"{tmp_path}/new/", inputs, "vtt") == tmp_path / "new"
    assert resolve_output_path(str(tmp_path / "one.VTT"), inputs, "vtt") == tmp_path / "one.VTT"
    (tmp_path / "dir.srt").mkdir()
    assert resolve_output_path(str(tmp_path / "dir.srt"), inputs, "srt") == tmp_path / "dir.srt"
    with pytest.raises(OutputError, match="--format vtt"):
        resolve_output_path(str(tmp_path / "x.vtt"), inputs, "srt")
    with pytest.raises(OutputError, match="--format parquet"):
        resolve_output_path(str(tmp_path / "x.parquet"), inputs, "srt")
    (tmp_path / "plain").write_text("")
    with pytest.raises(OutputError, match="not a folder"):
        resolve_output_path(str(tmp_path / "plain"), inputs, "srt")


def test_open_writer_picks_the_writer(tmp_path: Path) -> None:
    assert isinstance(open_writer(tmp_path / "o.parquet", "parquet"), OutputWriter)
    assert isinstance(open_writer(tmp_path / "subs", "srt"), SubtitleWriter)
    with pytest.raises(OutputError, match="open_writer"):
        OutputWriter(tmp_path / "o.srt", "srt")


def test_rows_without_word_timings_use_segments_or_text(tmp_path: Path) -> None:
    out = tmp_path / "subs"
    seg_row = OutputRow(id="long", text="first part. second part", segments=[
        {"start": 10.0, "end": 12.0, "text": "first part."},
        {"start": 15.0, "end": 16.0, "text": "second part"}], duration=20.0)
    text_row = OutputRow(id="short", text="just this", duration=1.5)
    with SubtitleWriter(out, "srt") as w:
        w.write(seg_row)
        w.write(text_row)
    long_cues = list(srt.parse((out / "long.srt").read_text()))
    assert [(p.start.total_seconds(), p.end.total_seconds(), p.content) for p in long_cues] == [
        (10.0, 12.0, "first part."), (15.0, 16.0, "second part")]
    short = list(srt.parse((out / "short.srt").read_text()))
    assert [(p.start.total_seconds(), p.end.total_seconds(), p.content) for p in short] == [
        (0.0, 1.5, "just this")]
    assert {e["id"]: e["timings"] for e in _index(out)[1:]} == {"long": "segments",
                                                                "short": "text"}


def test_index_appends_are_whole_lines(tmp_path: Path) -> None:
    # Two writers on one folder (two shard processes) append to one index.
    out = tmp_path / "subs"
    a, b = SubtitleWriter(out, "srt", {"shard": "0"}), SubtitleWriter(out, "srt", {"shard": "1"})
    for i in range(10):
        (a if i % 2 else b).write(_ok(i))
    a.close()
    b.close()
    entries = _index(out)
    assert sum("metadata" in e for e in entries) == 2
    assert SubtitleWriter(out, "srt").done_ids() == {f"u{i}" for i in range(10)}


@pytest.mark.parametrize("bad", [{"max_duration_s": float("inf")}, {"min_gap_s": float("inf")},
                                 {"max_duration_s": float("nan")}, {"min_gap_s": -0.1},
                                 {"max_duration_s": 0.0}])
def test_cue_limits_must_be_finite_numbers(bad: dict) -> None:
    with pytest.raises(ValueError, match="must be a number"):
        CueOptions(**bad)

