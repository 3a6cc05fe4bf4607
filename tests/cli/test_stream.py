"""``oasr stream`` over files, with the engine replaced by the scripted stand-in. The scripted
audio is shaped for the energy gate (tones, not speech), so these runs endpoint with
``--vad energy``; Silero's endpointing on real speech is tested in
``tests/streaming/test_chunkwise.py``."""

from __future__ import annotations

import json
import re

import pytest
import soundfile as sf
from typer.testing import CliRunner

from oasr.cli.app import app
from tests.streaming.scripted_engine import SR, ScriptedEngine, scripted_audio


@pytest.fixture
def recording(tmp_path, monkeypatch):
    script, t = [], 0.4
    for i in range(12):
        script.append((f"word{i}" + ("." if i % 4 == 3 else ""), t, t + 0.3))
        t += 0.45 + (1.6 if i % 4 == 3 else 0.0)
    audio = scripted_audio(script, t + 0.5, seed=7)
    path = tmp_path / "rec.wav"
    sf.write(path, audio, SR, subtype="FLOAT")
    read_back, _ = sf.read(path, dtype="float32")
    engine = ScriptedEngine(read_back, script)
    monkeypatch.setattr("oasr.engine.engine.ASREngine", lambda config: engine)
    return path, script


def test_finals_are_printed_and_written_as_jsonl(recording, tmp_path) -> None:
    path, script = recording
    out = tmp_path / "finals.jsonl"
    result = CliRunner().invoke(app, ["stream", str(path), "--vad", "energy", "--output",
                                         str(out)])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 3 and lines[0].endswith("word0 word1 word2 word3.")
    assert "\r" not in result.stdout  # not a TTY: no partial line
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [w["word"] for r in rows for w in r["words"]] == [s[0] for s in script]
    assert rows[0]["start"] == pytest.approx(script[0][1], abs=1e-3)
    assert rows[0]["end"] == pytest.approx(script[3][2], abs=1e-3)
    assert [r["endpoint_rule"] for r in rows[:2]] == [2, 2]
    assert "commit lag" in result.stderr


def test_parquet_output_and_two_files_together(recording, tmp_path) -> None:
    import pyarrow.parquet as pq

    path, script = recording
    out = tmp_path / "finals.parquet"
    result = CliRunner().invoke(app, ["stream", str(path), str(path), "--vad", "energy", "-o",
                                         str(out)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out).to_pylist()
    assert len(table) == 6 and {r["source"] for r in table} == {str(path)}
    assert [w["word"] for w in table[0]["words"]] == [s[0] for s in script[:4]]


def test_bad_arguments_are_one_line_errors(recording, tmp_path) -> None:
    path, _ = recording
    r = CliRunner().invoke(app, ["stream"])
    assert r.exit_code == 2 and "--mic" in r.stderr
    r = CliRunner().invoke(app, ["stream", str(path), "-o", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and ".jsonl or .parquet" in r.stderr
    r = CliRunner().invoke(app, ["stream", str(path), "--vad", "fsmn"])
    assert r.exit_code == 2 and "no streaming mode" in r.stderr and "--vad silero" in r.stderr
    r = CliRunner().invoke(app, ["stream", str(path), "--vad", "webrtc"])
    assert r.exit_code == 2 and "unknown speech detector" in r.stderr


def test_live_view_rewrites_the_partial_line() -> None:
    import io

    from oasr.cli.stream import LiveView
    from oasr.streaming import StreamResult, Word

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    view = LiveView(out)
    view.partial("a", "hello wor")
    view.partial("a", "hello world")
    view.final("a", StreamResult(committed="hello world.", words=[Word("hello", 0.5, 0.9)],
                                 is_final=True, start=0.5, end=1.25))
    text = out.getvalue()
    assert text.count("\r\x1b[2K") == 2 and text.endswith("[    0.50 -     1.25] hello world.\n")


def test_mic_errors_name_the_fix(monkeypatch) -> None:
    from oasr.streaming import sources

    def missing():
        raise sources.MicError("PortAudio is not installed: apt-get install libportaudio2")

    monkeypatch.setattr(sources, "import_sounddevice", missing)
    r = CliRunner().invoke(app, ["stream", "--mic"])
    assert r.exit_code == 2 and "apt-get install libportaudio2" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = CliRunner().invoke(app, ["stream", "--list-devices"])
    assert r.exit_code == 2 and "libportaudio2" in r.stderr


def test_no_input_device_is_a_one_line_error() -> None:
    pytest.importorskip("sounddevice", exc_type=OSError)
    from oasr.streaming.sources import MicError, MicSource

    with pytest.raises(MicError, match="--list-devices|does not take"):
        MicSource("no-such-device-xyz")


def test_ctrl_c_flushes_the_last_final(recording, tmp_path, monkeypatch) -> None:
    from oasr.streaming import sources

    path, script = recording
    real = sources.file_chunks

    def interrupted(*args, **kwargs):
        for i, piece in enumerate(real(*args, **kwargs)):
            if i == 50:  # 5 s in: mid second utterance
                raise KeyboardInterrupt
            yield piece

    monkeypatch.setattr(sources, "file_chunks", interrupted)
    out = tmp_path / "finals.jsonl"
    r = CliRunner().invoke(app, ["stream", str(path), "--vad", "energy", "-o", str(out)])
    assert r.exit_code == 130
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    words = [w["word"] for row in rows for w in row["words"]]
    heard = [s[0] for s in script if s[2] <= 5.0]
    assert words == heard and rows[-1]["endpoint_rule"] is None  # the flushed last final


# ----------------------------------------------------------------------------- faults


def test_unreadable_files_are_one_line_each_and_the_others_stream_on(recording, tmp_path):
    from tests.helpers.audio_mutations import encode, wav_cases

    path, script = recording
    crafted = tmp_path / "crafted.wav"
    crafted.write_bytes(dict(wav_cases("w", encode("WAV", "PCM_16")))["w byte 20 = 0"])
    junk = tmp_path / "junk.flac"
    junk.write_bytes(b"not audio at all" * 40)
    missing = tmp_path / "missing.wav"
    out = tmp_path / "finals.jsonl"
    result = CliRunner().invoke(app, ["stream", str(crafted), str(path), str(junk),
                                      str(missing), str(path), "--vad", "energy", "-o",
                                      str(out)])
    assert result.exit_code == 1, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 3, result.stderr
    for bad, line in zip((crafted, junk, missing), errors, strict=True):
        assert line.startswith(f"error: {bad}: ") and line.count(str(bad)) == 1, line
    assert "Traceback" not in result.output
    assert (f"3 of 5 files could not be read: {crafted}, {junk}, {missing}"
            in result.stderr)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 6 and {r["source"] for r in rows} == {str(path)}  # both good files


def test_a_rerun_appends_to_earlier_finals(recording, tmp_path):
    path, _ = recording
    out = tmp_path / "finals.jsonl"
    args = ["stream", str(path), "--vad", "energy", "-o", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    first = out.read_text().splitlines()
    with open(out, "a", encoding="utf-8") as f:
        f.write('{"source": "torn by a ki')  # a kill mid-line
    assert CliRunner().invoke(app, args).exit_code == 0
    lines = out.read_text().splitlines()
    assert lines == first + first  # earlier finals kept, the torn line dropped


def test_an_output_we_did_not_write_is_refused_before_the_model_loads(recording, tmp_path,
                                                                      monkeypatch):
    import os

    path, _ = recording

    def no_engine(config):
        raise AssertionError("the engine was built")

    monkeypatch.setattr("oasr.engine.engine.ASREngine", no_engine)
    theirs = tmp_path / "notes.jsonl"
    theirs.write_text('{"mine": 1}\n')
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)
    for target, says in ((theirs, "notes.jsonl exists and is not an oasr output"),
                         (fifo, "is a FIFO")):
        r = CliRunner().invoke(app, ["stream", str(path), "--vad", "energy", "-o", str(target)])
        assert r.exit_code == 2, r.output
        assert says in " ".join(r.stderr.split()) and "Traceback" not in r.output
    assert theirs.read_text() == '{"mine": 1}\n'


def test_the_summary_gives_coverage_and_names_speech_left_without_words(tmp_path,
                                                                        monkeypatch) -> None:
    script, t = [], 0.4
    for i in range(8):
        script.append((f"word{i}" + ("." if i % 4 == 3 else ""), t, t + 0.3))
        t += 0.45 + (4.0 if i % 4 == 3 else 0.0)
    ghost = ("ghost", script[3][2] + 1.4, script[3][2] + 2.6)  # heard by nothing
    audio = scripted_audio(script + [ghost], t + 0.5, seed=7)
    path = tmp_path / "rec.wav"
    sf.write(path, audio, SR, subtype="FLOAT")
    read_back, _ = sf.read(path, dtype="float32")
    engine = ScriptedEngine(read_back, script)
    monkeypatch.setattr("oasr.engine.engine.ASREngine", lambda config: engine)
    result = CliRunner().invoke(app, ["stream", str(path), "--vad", "energy"])
    assert result.exit_code == 0, result.output
    assert "coverage " in result.stderr and "coverage 100.0%" not in result.stderr
    warning = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and str(path) in warning[0]
    (a, b), = re.findall(r"(\d+\.\d)-(\d+\.\d) s", warning[0])
    assert float(a) == pytest.approx(ghost[1], abs=0.15)
    assert float(b) == pytest.approx(ghost[2], abs=0.15)


def test_a_fully_covered_stream_reports_full_coverage_and_no_warning(recording) -> None:
    path, _ = recording
    result = CliRunner().invoke(app, ["stream", str(path), "--vad", "energy"])
    assert result.exit_code == 0, result.output
    assert "coverage 100.0% of detected speech" in result.stderr
    assert "warning:" not in result.stderr
