"""Audio sources for ``oasr stream``: files (as fast as possible, or paced in real time) and a
microphone through ``sounddevice`` over PortAudio (the optional extra ``oasr[mic]``)."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import numpy as np


class MicError(RuntimeError):
    """A microphone that cannot be opened; the message names the fix."""


def file_chunks(path: str, sample_rate: int, chunk_s: float, realtime: bool
                ) -> Iterator[np.ndarray]:
    """(n,) float32 pieces of ``path`` at ``sample_rate``; ``realtime`` sleeps so that piece k
    is yielded no earlier than k * chunk_s after the first, as a live source delivers it."""
    from oasr.audio import iter_audio_chunks

    t0 = time.monotonic()
    heard = 0.0
    for chunk in iter_audio_chunks(path, sample_rate, chunk_seconds=chunk_s):
        if realtime:
            wait = t0 + heard - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        heard += len(chunk) / sample_rate
        yield chunk


def import_sounddevice() -> Any:
    try:
        import sounddevice
    except ImportError as exc:
        if "PortAudio" in str(exc) or isinstance(exc, OSError):
            raise MicError("PortAudio is not installed: apt-get install libportaudio2 (Debian/"
                           "Ubuntu) or brew install portaudio (macOS)") from None
        raise MicError("--mic needs the sounddevice package: pip install 'oasr[mic]'") from None
    except OSError:
        raise MicError("PortAudio is not installed: apt-get install libportaudio2 (Debian/"
                       "Ubuntu) or brew install portaudio (macOS)") from None
    return sounddevice


def list_input_devices() -> list[tuple[int, str, int, float]]:
    """(index, name, input channels, default rate) of every device with an input."""
    sd = import_sounddevice()
    return [(i, d["name"], int(d["max_input_channels"]), float(d["default_samplerate"]))
            for i, d in enumerate(sd.query_devices()) if d["max_input_channels"] > 0]


class MicSource:
    """Mono float32 blocks from an input device, at the device's rate unless ``sample_rate``.

    Iterating yields ``(rate, block)``; the PortAudio callback only enqueues, so a slow decode
    never drops audio (the queue grows instead)."""

    def __init__(self, device: str | int | None = None, sample_rate: int | None = None,
                 block_s: float = 0.1) -> None:
        sd = self.sd = import_sounddevice()
        if isinstance(device, str) and device.isdigit():
            device = int(device)
        try:
            info = sd.query_devices(device, "input")
        except (ValueError, sd.PortAudioError) as exc:
            name = device if device is not None else "(default)"
            raise MicError(f"no input device {name} ({exc}); see oasr stream --list-devices "
                           "and pass --input-device") from None
        self.rate = int(sample_rate or info["default_samplerate"])
        try:
            sd.check_input_settings(device=device, channels=1, samplerate=self.rate,
                                    dtype="float32")
        except (ValueError, sd.PortAudioError) as exc:
            raise MicError(f"input device {info['name']!r} does not take {self.rate} Hz mono "
                           f"({exc}); pass --mic-rate {int(info['default_samplerate'])} "
                           "(its default)") from None
        self.name = info["name"]
        self._q: queue.Queue[np.ndarray] = queue.Queue()
        self._stream = sd.InputStream(device=device, channels=1, samplerate=self.rate,
                                      dtype="float32", blocksize=int(self.rate * block_s),
                                      callback=self._callback)

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        self._q.put(indata[:, 0].copy())

    def __enter__(self) -> MicSource:
        self._stream.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        # abort, not stop: stop waits for PortAudio's buffers to complete, and a source that
        # has gone quiet (PulseAudio's pipe source once its writer closes, a stalled device)
        # holds that wait for minutes after Ctrl-C. Every block the callback was handed is
        # already queued; abort drops only the one PortAudio was still filling (<= block_s).
        self._stream.abort()
        self._stream.close()

    def blocks(self, timeout: float = 1.0) -> Iterator[np.ndarray]:
        """Everything captured since the last block, joined (waits for at least one block)."""
        while True:
            try:
                first = self._q.get(timeout=timeout)
            except queue.Empty:
                continue
            yield np.concatenate([first, self.pending()])

    def pending(self) -> np.ndarray:
        """The captured blocks not read yet, without waiting (what Ctrl-C must still decode)."""
        out = []
        while True:
            try:
                out.append(self._q.get_nowait())
            except queue.Empty:
                return np.concatenate(out) if out else np.zeros(0, np.float32)
