"""Audio input: a path or the file's bytes -> mono float32 at the model's sample rate.

Channels are down-mixed by their mean; any rate is resampled with soxr (``RESAMPLE_QUALITY``).
``offset`` / ``duration`` seek inside the container, so a segment of a long recording costs its
own length, not the prefix before it. A silent recording is not an error here (it decodes to
zeros and the engine decides what silence means); every other failure raises
``AudioDecodeError`` naming the source, the problem and the fix.

Untrusted files: samples are read in pieces of at most ``MAX_READ_SAMPLES``, so a header that
lies about its length or channel count costs what the file holds, not what it claims; and an
exception any decoder library raises on a malformed file (they are not all typed) becomes an
``AudioDecodeError`` naming the source (:func:`_decoding`), so one bad file is one error row.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from oasr.audio.errors import AudioDecodeError, AudioSource, describe_source
from oasr.audio.readers import FIX_CORRUPT, NativeReader, open_reader
from oasr.audio.resample import StreamResampler, resample

# Samples (frames x channels) per read from a decoder: 16 MB of float32.
MAX_READ_SAMPLES = 1 << 22


@contextmanager
def _decoding(source: AudioSource) -> Iterator[None]:
    """Any exception a decoder raises on a malformed file, as an AudioDecodeError naming it."""
    try:
        yield
    except AudioDecodeError:
        raise
    except Exception as err:  # decoders raise what they like on crafted input; see above
        raise AudioDecodeError(
            describe_source(source),
            f"is not a readable audio file (the decoder failed: {type(err).__name__}: {err})",
            FIX_CORRUPT,
        ) from err


def _read(reader: NativeReader, count: int | None) -> np.ndarray:
    """Up to ``count`` frames (None: to the end) as (n, C), in reads of bounded size."""
    step = max(1, MAX_READ_SAMPLES // reader.channels)
    pieces: list[np.ndarray] = []
    got = 0
    while count is None or got < count:
        want = step if count is None else min(step, count - got)
        x = reader.read(want)
        if x.shape[0]:
            pieces.append(x)
            got += x.shape[0]
        if x.shape[0] < want:
            break
    if not pieces:
        return np.zeros((0, reader.channels), dtype=np.float32)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


class AudioInfo(NamedTuple):
    """Header facts, read without decoding. ``frames`` is exact for PCM and FLAC and the
    container's estimate for compressed streams (MP3, Opus, AAC); ``duration`` follows it."""

    sample_rate: int
    frames: int
    channels: int
    duration: float


def audio_info(source: AudioSource) -> AudioInfo:
    """(sample_rate, frames, channels, duration_s) of ``source`` at its own rate."""
    with _decoding(source), open_reader(source) as reader:
        return AudioInfo(
            reader.sample_rate,
            reader.frames,
            reader.channels,
            reader.frames / reader.sample_rate,
        )


def load_audio(
    source: AudioSource,
    sample_rate: int = 16000,
    offset: float = 0.0,
    duration: float | None = None,
) -> np.ndarray:
    """Decode ``source`` to (N,) float32 mono at ``sample_rate``.

    offset / duration: seconds; the segment is cut at the file's own rate before resampling.
    A segment running past the end is shortened to what the file holds.
    """
    _check_args(sample_rate, offset, duration)
    with _decoding(source):
        with open_reader(source) as reader:
            start, count = _span(reader, offset, duration)
            reader.seek(start)
            x = _read(reader, count)
            if x.shape[0] == 0:
                raise _nothing_decoded(reader, offset)
            mono = _downmix(x)
            _check_finite(mono, reader, start)
        return resample(mono, reader.sample_rate, sample_rate)


def iter_audio_chunks(
    source: AudioSource,
    sample_rate: int = 16000,
    chunk_seconds: float = 30.0,
    offset: float = 0.0,
    duration: float | None = None,
) -> Iterator[np.ndarray]:
    """Yield ``source`` as consecutive (n,) float32 mono pieces at ``sample_rate``.

    Every piece but the last holds exactly ``round(chunk_seconds * sample_rate)`` samples; the
    pieces concatenate to what ``load_audio`` returns for the same arguments. At most about one
    chunk is held at the native rate at a time, and the resampler carries its filter state
    across chunk boundaries, so they leave no artefacts. Errors surface on the first ``next``.
    """
    _check_args(sample_rate, offset, duration)
    if not chunk_seconds > 0:
        raise ValueError(f"chunk_seconds must be > 0, got {chunk_seconds}")
    out_chunk = max(1, round(chunk_seconds * sample_rate))
    with _decoding(source), open_reader(source) as reader:
        start, remaining = _span(reader, offset, duration)
        reader.seek(start)
        block = max(1, math.ceil(chunk_seconds * reader.sample_rate))
        resampler = StreamResampler(reader.sample_rate, sample_rate)
        pending: list[np.ndarray] = []
        buffered = 0
        position = start
        last = False
        while not last:
            want = block if remaining is None else min(block, remaining)
            x = _read(reader, want)
            if position == start and x.shape[0] == 0:
                raise _nothing_decoded(reader, offset)
            mono = _downmix(x)
            _check_finite(mono, reader, position)
            position += x.shape[0]
            if remaining is not None:
                remaining -= x.shape[0]
            last = x.shape[0] < want or remaining == 0
            y = resampler.push(mono, last=last)
            if y.shape[0]:
                pending.append(y)
                buffered += y.shape[0]
            while buffered >= out_chunk or (last and buffered):
                joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
                take = min(out_chunk, buffered)
                yield joined[:take]
                rest = joined[take:]
                pending = [rest] if rest.shape[0] else []
                buffered = rest.shape[0]


def _check_args(sample_rate: int, offset: float, duration: float | None) -> None:
    if not sample_rate > 0:
        raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
    if not offset >= 0:
        raise ValueError(f"offset must be >= 0 seconds, got {offset}")
    if duration is not None and not duration > 0:
        raise ValueError(f"duration must be > 0 seconds or None, got {duration}")


def _span(reader: NativeReader, offset: float, duration: float | None) -> tuple[int, int | None]:
    """(first frame, frame count or None for "to the end") at the reader's rate."""
    start = round(offset * reader.sample_rate)
    count = None if duration is None else max(1, round(duration * reader.sample_rate))
    return start, count


def _downmix(x: np.ndarray) -> np.ndarray:
    """(n, C) -> (n,) float32, the mean over channels."""
    if x.shape[1] == 1:
        return np.ascontiguousarray(x[:, 0], dtype=np.float32)
    return x.mean(axis=1, dtype=np.float32)


def _check_finite(x: np.ndarray, reader: NativeReader, start: int) -> None:
    finite = np.isfinite(x)
    if finite.all():
        return
    first = start + int(np.argmin(finite))
    raise AudioDecodeError(
        reader.label,
        f"contains NaN or Inf samples (first at {first / reader.sample_rate:.3f} s)",
        "the file holds invalid floating-point data; re-export it from its source "
        "(e.g. as 16-bit PCM)",
    )


def _nothing_decoded(reader: NativeReader, offset: float) -> AudioDecodeError:
    if offset > 0:
        return AudioDecodeError(
            reader.label,
            f"offset {offset:.3f} s is at or past the end of the audio "
            f"(~{reader.frames / reader.sample_rate:.3f} s)",
            "use an offset inside the recording",
        )
    return AudioDecodeError(
        reader.label,
        "decodes to 0 samples",
        "the recording is empty; drop it from the input or re-export it",
    )
