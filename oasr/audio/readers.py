"""Container readers: samples at the file's own rate and channel count, with seeking.

libsndfile (through soundfile) reads WAV, FLAC, OGG/Vorbis, OGG/Opus and MP3; FFmpeg (through
PyAV, imported only when libsndfile declines a file) reads the rest: M4A/AAC, MP4, WebM, and
whatever else FFmpeg demuxes. Both readers hand out (n, C) float32 blocks so the caller decides
how much sits in memory at once.
"""

from __future__ import annotations

import functools
import io
import logging
import os
from typing import Any

import numpy as np
import soundfile as sf

from oasr.audio.errors import AudioDecodeError, AudioSource, describe_source
from oasr.audio.native_stderr import native_stderr_silenced

logger = logging.getLogger("oasr.audio")

FIX_CORRUPT = "re-download the file or re-encode it (e.g. ffmpeg -i IN -ar 16000 OUT.flac)"
FIX_FORMAT = (
    "supported containers are WAV, FLAC, OGG/Vorbis, OGG/Opus, MP3, M4A/AAC, MP4 and WebM; "
    "check that the file or bytes really hold audio"
)
# What a header may declare. Below 1 kHz no recording carries speech, and resampling up from
# a lied-about rate (1 Hz) would multiply the samples by 16,000; above 768 kHz no converter
# records. libsndfile reads at most 1,024 channels.
MIN_SAMPLE_RATE = 1000
MAX_SAMPLE_RATE = 768_000
MAX_CHANNELS = 1024


class NativeReader:
    """Reads (n, C) float32 frames at the container's sample rate.

    ``frames`` is the declared length in frames: exact for PCM and FLAC, the container's
    estimate for compressed streams (MP3, Opus, AAC), where decoding may yield slightly fewer.
    """

    label: str
    sample_rate: int
    channels: int
    frames: int

    def seek(self, frame: int) -> None:
        """Position the next ``read`` at ``frame``; past the end, reads return nothing."""
        raise NotImplementedError

    def read(self, n: int) -> np.ndarray:
        """Up to ``n`` frames (all remaining for ``n < 0``) as (m, C) float32; ``m < n`` only at
        the end of the stream."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> NativeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_header(self) -> None:
        """Refuse a header whose rate or channel count no recording has (a corrupt or
        crafted file): everything after it would divide by it or allocate by it."""
        if not MIN_SAMPLE_RATE <= self.sample_rate <= MAX_SAMPLE_RATE:
            raise AudioDecodeError(
                self.label,
                f"declares a sample rate of {self.sample_rate} Hz (readable: "
                f"{MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz), so its header is corrupt",
                FIX_CORRUPT,
            )
        if not 1 <= self.channels <= MAX_CHANNELS:
            raise AudioDecodeError(
                self.label,
                f"declares {self.channels} channels (readable: 1-{MAX_CHANNELS}), so its "
                "header is corrupt",
                FIX_CORRUPT,
            )

    def _corrupt(self, position: int, detail: str) -> AudioDecodeError:
        # A decoder that fails reports no position (or -1): say nothing rather than "-0.00 s".
        where = f" after {position / self.sample_rate:.2f} s" if position > 0 else ""
        return AudioDecodeError(
            self.label,
            f"is truncated or corrupt: decoding failed{where} ({detail})",
            FIX_CORRUPT,
        )


class SoundFileReader(NativeReader):
    """libsndfile: sample-exact seeks in every format it reads."""

    def __init__(self, file: str | io.BytesIO, label: str) -> None:
        self.label = label
        # A path as bytes: soundfile encodes a str as UTF-8, which a name that is not UTF-8
        # (held by Python as surrogate escapes) cannot be.
        with native_stderr_silenced():
            self._f = sf.SoundFile(os.fsencode(file) if isinstance(file, str) else file)
        self._quiet = self._f.format == "MP3"  # libmpg123 is the decoder that prints
        self.sample_rate = int(self._f.samplerate)
        self.channels = int(self._f.channels)
        self.frames = int(self._f.frames)
        self._pos = 0
        self._eof = False
        try:
            self._check_header()
        except AudioDecodeError:
            self._f.close()
            raise

    def seek(self, frame: int) -> None:
        self._eof = False
        if frame == self._pos:
            return
        if frame >= self.frames:
            self._eof = True
            return
        try:
            with native_stderr_silenced():
                self._f.seek(frame)
        except (sf.LibsndfileError, RuntimeError):
            # Compressed streams over-declare their length; a seek into the gap is the end.
            self._eof = True
            return
        self._pos = frame

    def read(self, n: int) -> np.ndarray:
        if self._eof:
            return np.zeros((0, self.channels), dtype=np.float32)
        try:
            if self._quiet:
                with native_stderr_silenced():
                    x = self._f.read(n, dtype="float32", always_2d=True)
            else:
                x = self._f.read(n, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError) as err:
            raise self._corrupt(self._failed_at(), _sf_message(err)) from err
        self._pos += x.shape[0]
        if n >= 0 and x.shape[0] < n:
            self._eof = True
        return x

    def _failed_at(self) -> int:
        try:
            return max(int(self._f.tell()), self._pos)
        except (sf.LibsndfileError, RuntimeError):
            return self._pos

    def close(self) -> None:
        self._f.close()


class _NoAudioStream(Exception):
    pass


class _Undecodable(Exception):
    """FFmpeg found an audio stream it cannot decode; the message says why."""


class PyAVReader(NativeReader):
    """FFmpeg through PyAV, for containers libsndfile does not read.

    Seeks land on a packet boundary before the target (minus a pre-roll, so overlap-add
    codecs like AAC and Opus have settled) and decoded samples before the target are dropped,
    which keeps seeks sample-accurate against the frames' timestamps.
    """

    PREROLL_SECONDS = 0.25

    def __init__(self, file: str | io.BytesIO, label: str) -> None:
        import av

        self._av = av
        self.label = label
        self._c = av.open(file, mode="r")
        try:
            self._open_stream()
        except BaseException:
            self._c.close()
            raise
        self._decoder: Any = None
        self._pending: list[np.ndarray] = []
        self._buffered = 0
        self._next_index: int | None = 0  # native index of the next decoded sample
        self._want = 0  # drop decoded samples before this index
        self._pos = 0  # index of the next sample read() returns
        self._eof = False

    def _open_stream(self) -> None:
        if not self._c.streams.audio:
            kinds = sorted({s.type for s in self._c.streams}) or ["none"]
            raise _NoAudioStream(", ".join(kinds))
        self._s = self._c.streams.audio[0]
        cc = self._s.codec_context
        if cc is None:  # a stream FFmpeg demuxes but cannot decode (e.g. format tag 0)
            tag = getattr(self._s, "codec_tag", None)
            raise _Undecodable("no decoder for its audio codec" + (f" {tag}" if tag else ""))
        self.sample_rate = int(cc.sample_rate or self._s.rate or 0)
        self.channels = int(cc.layout.nb_channels) if cc.layout else int(cc.channels)
        if self.sample_rate <= 0 or self.channels <= 0:
            # The demuxer was picked by the file name and found no stream parameters.
            raise _Undecodable("its audio stream has no sample rate or channels")
        self._check_header()
        self._tb = self._s.time_base
        self._origin = self._s.start_time or 0
        self.frames = self._declared_frames()

    def _declared_frames(self) -> int:
        if self._s.duration is not None and self._tb is not None:
            return int(round(float(self._s.duration * self._tb) * self.sample_rate))
        if self._c.duration is not None:
            return int(round(self._c.duration / self._av.time_base * self.sample_rate))
        # No duration in the headers: sum the packet durations (demuxing only, no decoding).
        total = 0
        for packet in self._c.demux(self._s):
            if packet.duration:
                total += packet.duration
        self._c.seek(self._origin, stream=self._s)
        return int(round(float(total * self._tb) * self.sample_rate)) if self._tb else 0

    def seek(self, frame: int) -> None:
        self._pending, self._buffered, self._eof = [], 0, False
        self._want = self._pos = frame
        if self._decoder is None and self._next_index == 0 and frame <= 0:
            return  # positioned at the start with nothing decoded yet
        target = max(0, frame - int(self.PREROLL_SECONDS * self.sample_rate))
        ts = self._origin + int(target / self.sample_rate / self._tb)
        self._restart(ts)

    def _restart(self, ts: int) -> None:
        try:
            self._c.seek(ts, stream=self._s, backward=True)
        except self._av.FFmpegError as err:
            raise self._corrupt(self._pos, _av_message(err)) from err
        self._decoder = None
        self._next_index = None if ts > self._origin else 0

    def _next_frame(self) -> Any:
        if self._decoder is None:
            self._decoder = self._c.decode(self._s)
        try:
            return next(self._decoder)
        except StopIteration:
            return None
        except self._av.FFmpegError as err:
            raise self._corrupt(self._pos + self._buffered, _av_message(err)) from err

    def _fill(self, n: int) -> None:
        while (n < 0 or self._buffered < n) and not self._eof:
            frame = self._next_frame()
            if frame is None:
                self._eof = True
                break
            block = _frame_to_float32(frame)
            if block.shape[1] != self.channels:
                raise self._corrupt(
                    self._pos + self._buffered,
                    f"channel count changes from {self.channels} to {block.shape[1]}",
                )
            if self._next_index is None:
                tb = frame.time_base or self._tb
                start = (
                    None
                    if frame.pts is None
                    else int(round(float((frame.pts - self._origin) * tb) * self.sample_rate))
                )
                if start is None or start > self._want:
                    # No timestamp, or the demuxer overshot: decode from the start instead,
                    # counting samples.
                    self._restart(self._origin)
                    continue
                self._next_index = start
            drop = min(max(0, self._want - self._next_index), block.shape[0])
            self._next_index += block.shape[0]
            if drop < block.shape[0]:
                self._pending.append(block[drop:])
                self._buffered += block.shape[0] - drop

    def read(self, n: int) -> np.ndarray:
        self._fill(n)
        if not self._pending:
            return np.zeros((0, self.channels), dtype=np.float32)
        data = np.concatenate(self._pending, axis=0)
        take = data.shape[0] if n < 0 else min(n, data.shape[0])
        rest = data[take:]
        self._pending = [rest] if rest.shape[0] else []
        self._buffered = rest.shape[0]
        self._pos += take
        return data[:take]

    def close(self) -> None:
        self._c.close()


_INT_SCALE = {"u8": 128.0, "s16": 32768.0, "s32": 2147483648.0, "s64": 9223372036854775808.0}


def _frame_to_float32(frame: Any) -> np.ndarray:
    """An FFmpeg AudioFrame (any sample format) -> (samples, C) float32 in [-1, 1]."""
    base = frame.format.name.rstrip("p")
    if base == "s64":  # PyAV's to_ndarray refuses it: read the planes (padded) ourselves
        channels = frame.layout.nb_channels
        per_plane = frame.samples * (1 if frame.format.is_planar else channels)
        planes = [np.frombuffer(p, dtype="<i8")[:per_plane] for p in frame.planes]
        arr = np.stack(planes) if frame.format.is_planar else planes[0]
    else:
        arr = frame.to_ndarray()
    arr = arr.T if frame.format.is_planar else arr.reshape(-1, frame.layout.nb_channels)
    if base in ("flt", "dbl"):
        return np.ascontiguousarray(arr, dtype=np.float32)
    scale = _INT_SCALE[base]
    x = arr.astype(np.float32)
    if base == "u8":
        x -= 128.0
    return x / np.float32(scale)


def _sf_message(err: Exception) -> str:
    message = str(getattr(err, "error_string", None) or err)
    if "possibly a pipe" in message:
        # libsndfile's words for a format it does not recognise; the file was checked to exist
        # and be a regular, readable file before it was asked.
        return "not a format it recognises"
    return message.removeprefix("Error : ").rstrip(".")


def _text_head(head: bytes) -> str | None:
    """The first line of ``head`` when those bytes are text (UTF-8, no NUL, printable), else
    None: a transcript or a list of paths saved under an audio name."""
    if not head or b"\0" in head:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 4:  # a character cut at the end of the head is fine
            return None
        text = head[: err.start].decode("utf-8")
    if sum(c.isprintable() or c in "\t\r\n" for c in text) < 0.95 * len(text):
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:40] + ("..." if len(first) > 40 else "")


def _refuse_text(source: AudioSource, label: str) -> None:
    """Raise naming the file as text when neither decoder read it and it holds text."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        head = bytes(source[:4096])
    else:
        try:
            with open(os.fspath(source), "rb") as f:
                head = f.read(4096)
        except OSError:
            return
    first = _text_head(head)
    if first is not None:
        raise AudioDecodeError(
            label, f"holds text, not audio (it begins {first!r})",
            "pass the recording itself; a list of recordings is a manifest (.jsonl/.csv/.tsv "
            "with an audio column, see docs/manifests.md)")


def _av_message(err: Exception) -> str:
    return str(getattr(err, "strerror", None) or err)


def open_reader(source: AudioSource) -> NativeReader:
    """Open ``source`` (a path or the file's bytes) with libsndfile, else FFmpeg.

    Raises ``AudioDecodeError`` naming the source when neither can read it.
    """
    label = describe_source(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise AudioDecodeError(label, "is empty (0 bytes)", "pass the encoded file's bytes")

        def handle() -> str | io.BytesIO:
            return io.BytesIO(data)
    else:
        path = os.fspath(source)
        _check_path(path, label)

        def handle() -> str | io.BytesIO:
            return path

    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            return _soundfile_from_bytes(data, label)
        return SoundFileReader(handle(), label)
    except (sf.LibsndfileError, RuntimeError) as err:
        sf_error = _sf_message(err)
    try:
        import av
    except ImportError as err:
        raise AudioDecodeError(
            label,
            f"is not in a format libsndfile reads ({sf_error})",
            "install PyAV (pip install av) to read M4A/AAC/MP4/WebM",
        ) from err
    try:
        return PyAVReader(handle(), label)
    except _NoAudioStream as err:
        raise AudioDecodeError(
            label,
            f"contains no audio stream (streams: {err})",
            "pass a file with an audio track",
        ) from err
    except _Undecodable as err:
        _refuse_text(source, label)
        raise AudioDecodeError(
            label,
            f"is not a readable audio file (libsndfile: {sf_error}; FFmpeg: {err})",
            FIX_FORMAT,
        ) from err
    except av.FFmpegError as err:
        _refuse_text(source, label)
        raise AudioDecodeError(
            label,
            f"is not a readable audio file (libsndfile: {sf_error}; FFmpeg: {_av_message(err)})",
            FIX_FORMAT,
        ) from err


@functools.cache
def _proc_fd() -> bool:
    """Whether a descriptor can be opened by path here (/proc mounted): checked once."""
    return os.path.isdir("/proc/self/fd")


def _memory_file(data: bytes) -> int | None:
    """A descriptor of an anonymous in-memory file holding ``data`` (Linux ``memfd``), or None
    where the platform has none."""
    create = getattr(os, "memfd_create", None)
    if create is None or not _proc_fd():
        return None
    try:
        fd = create("oasr-audio", getattr(os, "MFD_CLOEXEC", 0))
    except OSError:
        return None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        os.close(fd)
        return None
    return fd


def _soundfile_from_bytes(data: bytes, label: str) -> SoundFileReader:
    """libsndfile over a file's bytes. From a file object it calls back into Python for every
    read, and each callback must take the GIL: beside a thread busy in Python, decoding threads
    wait up to a switch interval per callback (benchmarks/cpu_decode_contention.py: 70 rows in
    6-11 s that way, under 2 s from an in-memory file, which is read with plain system calls)."""
    fd = _memory_file(data)
    if fd is None:
        return SoundFileReader(io.BytesIO(data), label)
    try:
        # libsndfile opens its own descriptor; the file lives as long as one is open.
        return SoundFileReader(f"/proc/self/fd/{fd}", label)
    except (sf.LibsndfileError, RuntimeError, OSError) as err:
        # Out of descriptors (many long rows open at once), or bytes libsndfile cannot read:
        # the file object, which needs no descriptor, decides as before.
        reader = SoundFileReader(io.BytesIO(data), label)
        _slow_path_once(err)  # it read them: the in-memory file was what failed
        return reader
    finally:
        os.close(fd)


_slow_path_said = False


def _slow_path_once(err: Exception) -> None:
    global _slow_path_said
    if not _slow_path_said:
        _slow_path_said = True
        logger.warning("audio bytes are being decoded through a file object, slower beside a "
                       "busy thread: the in-memory file could not be opened (%s); if it says "
                       "too many open files, raise the limit (ulimit -n)", _sf_message(err))


def _check_path(path: str, label: str) -> None:
    if not os.path.exists(path):
        raise AudioDecodeError(label, "does not exist", "check the path")
    if os.path.isdir(path):
        raise AudioDecodeError(label, "is a directory, not an audio file", "name a file")
    try:
        with open(path, "rb") as f:
            empty = not f.read(1)
    except OSError as err:
        raise AudioDecodeError(
            label, f"cannot be opened ({err.strerror})", "check the file's permissions"
        ) from err
    if empty:
        raise AudioDecodeError(label, "is empty (0 bytes)", "re-export or re-download the file")
