"""Malformed audio never escapes as anything but ``AudioDecodeError``, and never hangs.

Structured mutations of WAV (16-bit, 24-bit stereo, float), FLAC, MP3 and Ogg/Vorbis headers
(``tests/helpers/audio_mutations.py``: byte flips in the header fields, lies about sizes, rates,
channels and bit depths, truncation at every chunk boundary, empty data) and seeded random
bytes. Every case must decode or raise ``AudioDecodeError``: through ``load_audio``,
``iter_audio_chunks`` and ``audio_info``, from bytes and (a sample of them) from a file.
Deterministic: the mutations are enumerated, the random bytes seeded.
"""

from __future__ import annotations

import faulthandler
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from oasr.audio import AudioDecodeError, audio_info, iter_audio_chunks, load_audio
from tests.helpers.audio_mutations import (
    Case,
    encode,
    flac_cases,
    mp3_cases,
    ogg_cases,
    random_cases,
    wav_cases,
)

CASE_SECONDS = 10.0  # one case: decoding a quarter second of audio takes milliseconds
FILE_SAMPLE = 7  # every 7th case is also read from a file


def _bases() -> dict[str, tuple[Callable[[str, bytes], Iterator[Case]], bytes]]:
    return {
        "wav16": (wav_cases, encode("WAV", "PCM_16")),
        "wav24-stereo": (wav_cases, encode("WAV", "PCM_24", channels=2)),
        "wav-float": (wav_cases, encode("WAV", "FLOAT", sample_rate=44100)),
        "flac": (flac_cases, encode("FLAC")),
        "mp3": (mp3_cases, encode("MP3", seconds=0.5)),
        "ogg-vorbis": (ogg_cases, encode("OGG", "VORBIS", seconds=0.5)),
    }


class _Hung(Exception):
    pass


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise _Hung in a case that runs past ``seconds`` (Python-level), and dump every
    thread and exit if the process is stuck in native code well past it."""
    def expire(*_: object) -> None:
        raise _Hung

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds * 3, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)


def _chunks(source: object) -> int:
    return sum(len(c) for c in iter_audio_chunks(source, 16000, chunk_seconds=0.1))


READS: dict[str, Callable[[object], object]] = {
    "load_audio": load_audio, "iter_audio_chunks": _chunks, "audio_info": audio_info}


def _outcomes(cases: list[Case], tmp_path: Path) -> tuple[dict[str, int], list[str]]:
    counts = {"decoded": 0, "AudioDecodeError": 0}
    escaped: list[str] = []
    for k, (name, data) in enumerate(cases):
        sources: list[object] = [data]
        if k % FILE_SAMPLE == 0:
            path = tmp_path / f"case{k}.bin"
            path.write_bytes(data)
            sources.append(str(path))
        for source in sources:
            for read_name, read in READS.items():
                try:
                    with _deadline(CASE_SECONDS):
                        result = read(source)
                except AudioDecodeError as err:
                    counts["AudioDecodeError"] += 1
                    assert str(err).startswith(err.source), err
                    continue
                except _Hung:
                    escaped.append(f"{name} via {read_name}: still running after "
                                   f"{CASE_SECONDS:g} s")
                    continue
                except Exception as err:  # the failure this test exists to find
                    escaped.append(f"{name} via {read_name} "
                                   f"({'file' if isinstance(source, str) else 'bytes'}): "
                                   f"{type(err).__name__}: {err}")
                    continue
                if isinstance(result, np.ndarray):
                    assert result.dtype == np.float32 and np.isfinite(result).all(), name
                counts["decoded"] += 1
    return counts, escaped


@pytest.mark.parametrize("container", list(_bases()))
def test_mutated_headers_decode_or_raise_audio_decode_error(container: str,
                                                            tmp_path: Path) -> None:
    mutate, data = _bases()[container]
    cases = list(mutate(container, data))
    assert len(cases) > 60, len(cases)
    counts, escaped = _outcomes(cases, tmp_path)
    assert not escaped, f"{len(escaped)} cases escaped:\n" + "\n".join(escaped[:20])
    # Both outcomes occur: the mutations reach the decoder, and lies are caught.
    assert counts["decoded"] > 0 and counts["AudioDecodeError"] > 0, counts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_bytes_raise_audio_decode_error(seed: int, tmp_path: Path) -> None:
    counts, escaped = _outcomes(list(random_cases(seed, 70)), tmp_path)
    assert not escaped, "\n".join(escaped[:20])
    assert counts["AudioDecodeError"] > 0, counts


def test_a_flipped_format_tag_is_an_audio_decode_error_not_an_attribute_error() -> None:
    # WAV byte 20 is the format tag: 0 is no codec; FFmpeg demuxes the stream and has no
    # decoder for it.
    data = bytearray(encode("WAV", "PCM_16"))
    data[20] = 0
    with pytest.raises(AudioDecodeError, match="no decoder for its audio codec"):
        load_audio(bytes(data))


def test_a_header_lying_about_its_length_costs_what_the_file_holds() -> None:
    # The Xing header's frame count set to 2**31 - 1: libsndfile declares 2.4e12 frames, and
    # reading "to the end" in one piece asked numpy for 4.5 TiB.
    mp3 = encode("MP3", seconds=0.5)
    cases = dict(mp3_cases("mp3", mp3))
    x = load_audio(cases[f"mp3 Xing frames = {(1 << 31) - 1}"])
    assert abs(len(x) - len(load_audio(mp3))) < 16000  # about the half second it holds
    # A FLAC claiming 2**36 - 1 samples ends in an error row, not an allocation.
    flac = dict(flac_cases("flac", encode("FLAC")))
    with pytest.raises(AudioDecodeError, match="truncated or corrupt"):
        load_audio(flac[f"flac STREAMINFO total samples = {(1 << 36) - 1}"])


def test_a_lied_about_rate_is_refused_naming_it() -> None:
    cases = dict(wav_cases("wav", encode("WAV", "PCM_16")))
    with pytest.raises(AudioDecodeError, match="declares a sample rate of 1 Hz"):
        load_audio(cases["wav sample rate = 1"])


def test_64_bit_integer_pcm_decodes() -> None:
    # libsndfile declines 64-bit integer WAV; FFmpeg decodes it to s64, which PyAV's
    # to_ndarray does not convert.
    import io

    import soundfile as sf

    tone = (0.25 * np.sin(np.arange(1600) * 0.05)).astype(np.float64)
    ints = np.round(tone * 2.0**63).astype("<i8")
    header = io.BytesIO()
    sf.write(header, tone.astype(np.float32), 16000, format="WAV", subtype="PCM_16")
    wav = bytearray(header.getvalue()[:44])
    wav[22:24] = (1).to_bytes(2, "little")  # channels
    wav[28:32] = (16000 * 8).to_bytes(4, "little")  # byte rate
    wav[32:34] = (8).to_bytes(2, "little")  # block align
    wav[34:36] = (64).to_bytes(2, "little")  # bits
    wav[40:44] = (len(ints) * 8).to_bytes(4, "little")
    wav[4:8] = (36 + len(ints) * 8).to_bytes(4, "little")
    x = load_audio(bytes(wav) + ints.tobytes())
    np.testing.assert_allclose(x, tone.astype(np.float32), atol=1e-6)
