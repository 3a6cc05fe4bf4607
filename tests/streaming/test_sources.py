"""File pacing for ``oasr stream --realtime`` (with a fake clock) and the mic error messages."""

from __future__ import annotations

import numpy as np
import soundfile as sf

from oasr.streaming import sources


def test_realtime_paces_chunks_on_the_audio_clock(tmp_path, monkeypatch) -> None:
    path = tmp_path / "a.wav"
    sf.write(path, np.zeros(16000, np.float32), 16000)
    now = [100.0]
    sleeps = []

    def sleep(s: float) -> None:
        sleeps.append(round(s, 6))
        now[0] += s

    monkeypatch.setattr(sources.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(sources.time, "sleep", sleep)
    chunks = list(sources.file_chunks(str(path), 16000, 0.25, realtime=True))
    assert [len(c) for c in chunks] == [4000] * 4
    assert sleeps == [0.25, 0.25, 0.25]  # chunk k no earlier than k * 0.25 s after the first
    sleeps.clear()
    assert len(list(sources.file_chunks(str(path), 16000, 0.25, realtime=False))) == 4
    assert sleeps == []
