"""oasr.audio: containers, resampling, down-mixing, seeking, chunking and refusals."""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from oasr.audio import (
    RESAMPLE_QUALITY,
    AudioDecodeError,
    audio_info,
    describe_source,
    iter_audio_chunks,
    load_audio,
    readers,
)
from oasr.audio.resample import resample
from tests.helpers.data import SHARED_DATA

MISC = SHARED_DATA / "misc"
SR = 16000


def _misc_rows() -> list[dict[str, str]]:
    tsv = MISC / "transcripts.tsv"
    if not tsv.exists():
        return []
    with tsv.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


MISC_ROWS = _misc_rows()
needs_misc = pytest.mark.skipif(not MISC_ROWS, reason=f"{MISC} is not present")


def _one_per_container() -> list[Path]:
    seen: dict[str, Path] = {}
    for row in MISC_ROWS:
        path = MISC / "audio" / row["file"]
        seen.setdefault(path.suffix, path)
    return [seen[k] for k in sorted(seen)]


def _sine(freq: float, rate: int, seconds: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _peak_hz(x: np.ndarray, rate: int) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spec)) * rate / len(x)


def _wav(path: Path, x: np.ndarray, rate: int, subtype: str = "PCM_16") -> Path:
    sf.write(path, x, rate, subtype=subtype)
    return path


# -- real files --------------------------------------------------------------------------------


@needs_misc
def test_misc_set_covers_the_containers() -> None:
    assert {p.suffix for p in _one_per_container()} >= {".wav", ".flac", ".mp3", ".opus"}


@needs_misc
@pytest.mark.parametrize("row", MISC_ROWS, ids=lambda r: r["file"])
def test_every_misc_file_decodes(row: dict[str, str]) -> None:
    path = MISC / "audio" / row["file"]
    x = load_audio(path)
    info = audio_info(path)
    listed = float(row["duration"])
    print(
        f"\n{row['file']}: decoded {len(x) / SR:.3f} s, header {info.duration:.3f} s "
        f"({info.sample_rate} Hz x{info.channels}), listed {listed:.2f} s"
    )
    assert x.dtype == np.float32 and x.ndim == 1
    assert np.isfinite(x).all() and np.abs(x).max() > 0.01  # real speech, not zeros
    assert abs(len(x) / SR - listed) < 0.1
    assert abs(info.duration - listed) < 0.1
    assert info.frames > 0 and info.channels >= 1


@needs_misc
@pytest.mark.parametrize("path", _one_per_container(), ids=lambda p: p.suffix)
def test_bytes_decode_like_the_path(path: Path) -> None:
    data = path.read_bytes()
    np.testing.assert_array_equal(load_audio(data), load_audio(path))
    assert audio_info(data) == audio_info(path)


@needs_misc
@pytest.mark.parametrize("path", _one_per_container(), ids=lambda p: p.suffix)
def test_offset_duration_cut_the_same_samples(path: Path) -> None:
    whole = load_audio(path)
    seg = load_audio(path, offset=1.0, duration=1.5)
    assert len(seg) == round(1.5 * SR)
    expected = whole[SR : SR + len(seg)]
    if audio_info(path).sample_rate == SR:
        np.testing.assert_array_equal(seg, expected)
    else:
        # The resampler's edges see the cut; away from them the samples agree.
        edge = 200
        np.testing.assert_allclose(seg[edge:-edge], expected[edge:-edge], atol=1e-5)


@needs_misc
def test_seek_reads_only_the_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    path = MISC / "audio" / "acoustic_corpus.wav"  # 26.7 s
    requested: list[int] = []
    original = readers.SoundFileReader.read

    def spy(self: readers.SoundFileReader, n: int) -> np.ndarray:
        requested.append(n)
        return original(self, n)

    monkeypatch.setattr(readers.SoundFileReader, "read", spy)
    seg = load_audio(path, offset=20.0, duration=2.0)
    assert len(seg) == 2 * SR
    assert requested == [2 * SR]


# -- resampling and channels -------------------------------------------------------------------


@pytest.mark.parametrize("rate", [44100, 48000, 8000, 22050])
def test_resampling_preserves_frequency_and_level(tmp_path: Path, rate: int) -> None:
    freq = 1000.0
    path = _wav(tmp_path / "sine.wav", _sine(freq, rate, 2.0), rate, subtype="FLOAT")
    x = load_audio(path, sample_rate=SR)
    assert abs(len(x) - 2 * SR) <= 1
    assert abs(_peak_hz(x, SR) - freq) <= 1.0
    rms = float(np.sqrt(np.mean(x[SR // 4 : -SR // 4] ** 2)))
    assert rms == pytest.approx(0.5 / math.sqrt(2), rel=0.01)
    assert RESAMPLE_QUALITY in ("HQ", "VHQ")


def test_downsampling_removes_content_above_the_new_nyquist(tmp_path: Path) -> None:
    # 11 kHz is above 8 kHz Nyquist of 16 kHz: a proper resampler removes it, no alias at 5 kHz.
    path = _wav(tmp_path / "hi.wav", _sine(11000.0, 48000, 1.0), 48000, subtype="FLOAT")
    x = load_audio(path)
    assert float(np.sqrt(np.mean(x[1000:-1000] ** 2))) < 1e-3


def test_target_rate_is_respected(tmp_path: Path) -> None:
    path = _wav(tmp_path / "s.wav", _sine(440.0, 16000, 1.0), 16000, subtype="FLOAT")
    x = load_audio(path, sample_rate=8000)
    assert len(x) == 8000 and abs(_peak_hz(x, 8000) - 440.0) <= 1.0


def test_channels_are_down_mixed_by_mean(tmp_path: Path) -> None:
    left = _sine(300.0, SR, 1.0)
    right = _sine(700.0, SR, 1.0, amp=0.25)
    third = np.linspace(-0.5, 0.5, SR, dtype=np.float32)
    stereo = _wav(tmp_path / "st.wav", np.stack([left, right], 1), SR, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(stereo), (left + right) / 2, atol=1e-7)
    three = _wav(tmp_path / "3ch.wav", np.stack([left, right, third], 1), SR, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(three), (left + right + third) / 3, atol=1e-7)
    assert audio_info(three).channels == 3


def test_silence_is_not_an_error(tmp_path: Path) -> None:
    path = _wav(tmp_path / "quiet.wav", np.zeros(4000, dtype=np.float32), SR)
    x = load_audio(path)
    assert len(x) == 4000 and not x.any()


# -- chunked reading ---------------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "channels"), [(48000, 2), (44100, 1), (16000, 1)])
def test_chunks_concatenate_to_the_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rate: int, channels: int
) -> None:
    rng = np.random.default_rng(rate)
    native = (rng.standard_normal((round(rate * 23.3), channels)) * 0.1).astype(np.float32)
    path = _wav(tmp_path / "long.wav", native, rate, subtype="FLOAT")
    whole = load_audio(path)

    requested: list[int] = []
    original = readers.SoundFileReader.read

    def spy(self: readers.SoundFileReader, n: int) -> np.ndarray:
        requested.append(n)
        return original(self, n)

    monkeypatch.setattr(readers.SoundFileReader, "read", spy)
    chunks = list(iter_audio_chunks(path, SR, chunk_seconds=4.0))
    assert [len(c) for c in chunks[:-1]] == [4 * SR] * (len(chunks) - 1)
    assert 0 < len(chunks[-1]) <= 4 * SR
    joined = np.concatenate(chunks)
    assert len(joined) == len(whole)
    err = float(np.abs(joined - whole).max())
    print(f"\n{rate} Hz x{channels}: max |chunked - whole| = {err:.3g}")
    assert err < 1e-6
    # Bounded memory: never more than one chunk's worth at the native rate per read.
    assert max(requested) <= math.ceil(4.0 * rate)


def test_chunks_honour_offset_and_duration(tmp_path: Path) -> None:
    native = _sine(523.0, 44100, 12.0)
    path = _wav(tmp_path / "s.wav", native, 44100, subtype="FLOAT")
    chunks = list(iter_audio_chunks(path, SR, chunk_seconds=1.5, offset=2.0, duration=7.0))
    joined = np.concatenate(chunks)
    expected = load_audio(path, offset=2.0, duration=7.0)
    assert len(joined) == len(expected) == 7 * SR
    np.testing.assert_allclose(joined, expected, atol=1e-6)


def test_chunk_stream_matches_one_shot_resampler() -> None:
    from oasr.audio.resample import StreamResampler

    x = np.random.default_rng(3).standard_normal(48000 * 3 + 17).astype(np.float32)
    stream = StreamResampler(48000, SR)
    pieces = [
        stream.push(x[i : i + 10007], last=i + 10007 >= len(x)) for i in range(0, len(x), 10007)
    ]
    np.testing.assert_allclose(np.concatenate(pieces), resample(x, 48000, SR), atol=1e-6)


# -- PyAV containers ---------------------------------------------------------------------------


def _encode(container: str, codec: str, rate: int, x: np.ndarray) -> bytes:
    """x: (C, N) float32 -> the encoded file's bytes, through PyAV's encoders."""
    av = pytest.importorskip("av")
    if codec not in av.codecs_available:
        pytest.skip(f"this FFmpeg build has no {codec} encoder")
    layout = "mono" if x.shape[0] == 1 else "stereo"
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(x), format="fltp", layout=layout)
        frame.rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("suffix", "container", "codec", "rate"),
    [(".m4a", "ipod", "aac", 44100), (".webm", "webm", "libopus", 48000)],
)
def test_pyav_containers(
    tmp_path: Path, suffix: str, container: str, codec: str, rate: int
) -> None:
    left = _sine(440.0, rate, 3.0)
    data = _encode(container, codec, rate, np.stack([left, 0.5 * left]))
    path = tmp_path / f"clip{suffix}"
    path.write_bytes(data)
    with pytest.raises(sf.LibsndfileError):
        sf.info(path)  # so this really goes through the FFmpeg reader

    info = audio_info(path)
    assert (info.sample_rate, info.channels) == (rate, 2)
    assert abs(info.duration - 3.0) < 0.1
    x = load_audio(path)
    assert abs(len(x) / SR - 3.0) < 0.1  # codec padding at most a few frames
    assert abs(_peak_hz(x[SR // 2 : SR * 5 // 2], SR) - 440.0) <= 1.0
    rms = float(np.sqrt(np.mean(x[SR // 2 : SR * 5 // 2] ** 2)))
    assert rms == pytest.approx(0.75 * 0.5 / math.sqrt(2), rel=0.05)  # mean of L and 0.5 L
    np.testing.assert_array_equal(load_audio(data), x)

    # Seeking is sample-accurate: a one-sample slip would differ by ~0.02 on this sine.
    seg = load_audio(path, offset=1.0, duration=0.5)
    assert len(seg) == SR // 2
    np.testing.assert_allclose(seg[200:-200], x[SR + 200 : SR + SR // 2 - 200], atol=1e-3)

    chunks = np.concatenate(list(iter_audio_chunks(path, SR, chunk_seconds=0.7)))
    np.testing.assert_allclose(chunks, x, atol=1e-6)


def test_pyav_seek_that_overshoots_falls_back_to_decoding_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    left = _sine(440.0, 44100, 3.0)
    data = _encode("ipod", "aac", 44100, np.stack([left]))
    x = load_audio(data)
    # A negative pre-roll puts the demuxer's seek past the target, as a coarse index can.
    monkeypatch.setattr(readers.PyAVReader, "PREROLL_SECONDS", -1.0)
    restarts: list[int] = []
    original = readers.PyAVReader._restart

    def spy(self: readers.PyAVReader, ts: int) -> None:
        restarts.append(ts)
        original(self, ts)

    monkeypatch.setattr(readers.PyAVReader, "_restart", spy)
    seg = load_audio(data, offset=1.0, duration=0.5)
    assert len(restarts) == 2 and restarts[1] == 0  # the seek, then the fall-back
    np.testing.assert_allclose(seg[200:-200], x[SR + 200 : SR + SR // 2 - 200], atol=1e-3)


def test_file_without_an_audio_stream(tmp_path: Path) -> None:
    av = pytest.importorskip("av")
    if "mpeg4" not in av.codecs_available:
        pytest.skip("this FFmpeg build has no mpeg4 encoder")
    path = tmp_path / "video.mp4"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for _ in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    with pytest.raises(AudioDecodeError, match=re.escape(str(path)) + ".*no audio stream"):
        load_audio(path)


# -- refusals ----------------------------------------------------------------------------------


def _flac_bytes() -> bytes:
    buf = io.BytesIO()
    sf.write(buf, _sine(300.0, SR, 3.0), SR, format="FLAC")
    return buf.getvalue()


def _raises_naming(source, problem: str) -> AudioDecodeError:
    with pytest.raises(AudioDecodeError) as caught:
        load_audio(source)
    message = str(caught.value)
    assert message.startswith(describe_source(source) + ": ")
    assert re.search(problem, message), message
    assert isinstance(caught.value, ValueError)
    return caught.value


def test_truncated_flac_bytes() -> None:
    data = _flac_bytes()
    err = _raises_naming(data[: len(data) // 2], "truncated or corrupt")
    assert err.source == f"<bytes, {len(data) // 2} bytes>"
    _raises_naming(data[:60], "not a readable audio file")


def test_random_bytes() -> None:
    err = _raises_naming(np.random.default_rng(0).bytes(5000), "not a readable audio file")
    assert "possibly a pipe" not in str(err)
    _raises_naming(b"<html><body>404 Not Found</body></html>" * 20,
                   "holds text, not audio \\(it begins '<html><body>404 Not Found</body>")


def test_a_text_file_named_as_audio_is_called_text_not_a_pipe(tmp_path: Path) -> None:
    notes = tmp_path / "notes.mp3"
    notes.write_text("1688-142285-0000\tthere's iron they say in all our blood\n" * 50,
                     encoding="utf-8")
    err = _raises_naming(notes, "holds text, not audio \\(it begins .1688-142285-0000")
    assert "pipe" not in str(err) and "manifest" in str(err)
    utf8 = tmp_path / "utf8.wav"
    utf8.write_text("é" * 3000, encoding="utf-8")  # the 4 KiB head cuts a character in two
    _raises_naming(utf8, "holds text, not audio")


def test_empty_inputs(tmp_path: Path) -> None:
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    _raises_naming(empty, r"empty \(0 bytes\)")
    _raises_naming(str(empty), r"empty \(0 bytes\)")
    _raises_naming(b"", r"empty \(0 bytes\)")
    no_frames = _wav(tmp_path / "none.wav", np.zeros(0, dtype=np.float32), SR)
    _raises_naming(no_frames, "decodes to 0 samples")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_float_wav(tmp_path: Path, bad: float) -> None:
    x = _sine(200.0, SR, 1.0)
    x[12000:] = bad
    path = _wav(tmp_path / "bad.wav", x, SR, subtype="FLOAT")
    _raises_naming(path, r"NaN or Inf samples \(first at 0\.750 s\)")
    with pytest.raises(AudioDecodeError, match="NaN or Inf"):
        list(iter_audio_chunks(path, SR, chunk_seconds=0.25))
    # A segment before the bad samples is fine.
    assert len(load_audio(path, duration=0.5)) == SR // 2


def test_missing_path_and_directory(tmp_path: Path) -> None:
    _raises_naming(tmp_path / "nope.flac", "does not exist")
    _raises_naming(tmp_path, "is a directory")


def test_offset_past_the_end(tmp_path: Path) -> None:
    path = _wav(tmp_path / "s.wav", _sine(200.0, SR, 1.0), SR)
    with pytest.raises(AudioDecodeError, match=r"offset 2\.000 s is at or past the end"):
        load_audio(path, offset=2.0)
    with pytest.raises(AudioDecodeError, match="past the end"):
        next(iter_audio_chunks(path, SR, offset=1.0))
    # Running past the end shortens the segment instead.
    assert len(load_audio(path, offset=0.5, duration=5.0)) == SR // 2


def test_bad_arguments_are_not_decode_errors(tmp_path: Path) -> None:
    path = _wav(tmp_path / "s.wav", _sine(200.0, SR, 1.0), SR)
    for kwargs in ({"offset": -1.0}, {"duration": 0.0}, {"sample_rate": 0}):
        with pytest.raises(ValueError) as caught:
            load_audio(path, **kwargs)
        assert not isinstance(caught.value, AudioDecodeError)
    with pytest.raises(ValueError, match="chunk_seconds"):
        next(iter_audio_chunks(path, SR, chunk_seconds=0))


def test_describe_source() -> None:
    assert describe_source(b"abc") == "<bytes, 3 bytes>"
    assert describe_source(Path("/a/b.wav")) == "/a/b.wav"


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd (Linux)")
def test_bytes_are_read_from_an_in_memory_file_and_leave_no_descriptor(monkeypatch) -> None:
    data = _flac_bytes()
    real = readers.SoundFileReader
    given = []

    def recording(file, label):
        given.append(type(file).__name__)
        return real(file, label)

    monkeypatch.setattr(readers, "SoundFileReader", recording)
    before = _open_descriptors()
    in_memory = load_audio(data)
    chunks = np.concatenate(list(iter_audio_chunks(data, chunk_seconds=0.25)))
    assert given == ["str", "str"]  # the in-memory file's path, never a file object
    assert _open_descriptors() == before
    for bad in (data[: len(data) // 2], data[:60]):
        with pytest.raises(AudioDecodeError):
            load_audio(bad)
    assert _open_descriptors() == before
    # The same samples as libsndfile reading a file object (where there is no memfd).
    monkeypatch.delattr(readers.os, "memfd_create")
    np.testing.assert_array_equal(in_memory, load_audio(data))
    np.testing.assert_array_equal(chunks, in_memory)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd (Linux)")
def test_bytes_the_in_memory_file_cannot_open_are_read_from_a_file_object(
        monkeypatch, caplog) -> None:
    data = _flac_bytes()
    expected = load_audio(data)
    real = readers.SoundFileReader
    opened = []

    def out_of_descriptors(file, label):
        opened.append(type(file).__name__)
        if isinstance(file, str):
            raise RuntimeError("Error opening: Too many open files")
        return real(file, label)

    monkeypatch.setattr(readers, "SoundFileReader", out_of_descriptors)
    monkeypatch.setattr(readers, "_slow_path_said", False)
    with pytest.raises(AudioDecodeError):  # unreadable either way: no word of a slow path
        load_audio(data[:60])
    assert not readers._slow_path_said
    with caplog.at_level(logging.WARNING, logger="oasr.audio"):
        np.testing.assert_array_equal(load_audio(data), expected)
        np.testing.assert_array_equal(load_audio(data), expected)
    assert opened[-4:] == ["str", "BytesIO", "str", "BytesIO"]
    said = [r.getMessage() for r in caplog.records if r.name == "oasr.audio"]
    assert len(said) == 1 and "Too many open files" in said[0]  # once a process
