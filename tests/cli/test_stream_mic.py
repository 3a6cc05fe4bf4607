"""``oasr stream --mic`` for real: a LibriSpeech recording played into a PulseAudio virtual
microphone (a pipe source started here), captured through PortAudio, transcribed by the packaged
Whisper tiny.en, and scored."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.helpers.data import SHARED_DATA


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


UTT = "1688-142285-0002"  # 2.8 s: "you don't mean that you thought me so silly"


def _reference() -> str:
    table = SHARED_DATA / "librispeech-test-other-70/transcripts.tsv"
    for line in table.read_text().splitlines():
        parts = line.split("\t")
        if parts[0] == UTT:
            return parts[-1]
    raise AssertionError(f"{UTT} is not in transcripts.tsv")


@pytest.fixture
def pulse_mic(tmp_path):
    if shutil.which("pulseaudio") is None or shutil.which("pactl") is None:
        pytest.skip("PulseAudio is not installed (apt-get install pulseaudio pulseaudio-utils)")
    try:
        import sounddevice  # noqa: F401
    except (ImportError, OSError) as exc:
        pytest.skip(f"sounddevice / PortAudio unavailable: {exc}")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path), "HOME": str(tmp_path),
           "PULSE_RUNTIME_PATH": str(tmp_path / "pulse")}
    fifo = tmp_path / "mic.fifo"
    server = subprocess.Popen(
        ["pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--disable-shm",
         "--load=module-native-protocol-unix",
         f"--load=module-pipe-source source_name=vmic file={fifo} format=s16le rate=16000 "
         "channels=1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(50):
            ok = subprocess.run(["pactl", "set-default-source", "vmic"], env=env,
                                capture_output=True).returncode == 0
            if ok or server.poll() is not None:
                break
            time.sleep(0.1)
        if not ok:
            err = server.stderr.read().decode() if server.poll() is not None else ""
            pytest.skip(f"the PulseAudio server did not start: {err.strip()[-200:]}")
        yield env, fifo
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.slow
def test_mic_transcribes_a_recording_played_into_a_virtual_microphone(pulse_mic, tmp_path):
    from oasr.metrics.wer import score

    env, fifo = pulse_mic
    audio, sr = sf.read(SHARED_DATA / f"librispeech-test-other-70/audio/{UTT}.flac",
                        dtype="float32")
    assert sr == 16000
    played = np.concatenate([np.zeros(8000, np.float32), audio, np.zeros(3 * sr, np.float32)])
    pcm = (np.clip(played, -1, 1) * 32767).astype("<i2").tobytes()
    out = tmp_path / "finals.jsonl"
    root = Path(__file__).resolve().parents[2]
    cli = subprocess.Popen(
        [sys.executable, "-m", "oasr.cli.app", "stream", "--mic", "--device", "cpu",
         "--output", str(out)],
        env={**env, "PYTHONPATH": str(root)}, cwd=root, stdout=subprocess.DEVNULL,
        # Ctrl-C is what the test sends: a runner started in the background (nohup, `&`)
        # passes SIGINT down ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=_sigint_default,
        stderr=subprocess.PIPE)

    def play() -> None:  # real time, 0.1 s a write; the pipe source blocks until it is read
        with open(fifo, "wb") as f:
            for i in range(0, len(pcm), 3200):
                f.write(pcm[i:i + 3200])
                f.flush()
                time.sleep(0.1)

    listening = threading.Event()
    err_lines: list[bytes] = []

    def read_stderr() -> None:
        for line in cli.stderr:
            err_lines.append(line)
            if b"listening on" in line:
                listening.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    # Play only once the CLI captures: the pipe source runs whether anyone records or not.
    assert listening.wait(timeout=300), b"".join(err_lines)[-2000:]
    player = threading.Thread(target=play, daemon=True)
    player.start()
    player.join(timeout=120)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and cli.poll() is None:
        if out.exists() and out.read_text().strip():
            break
        time.sleep(0.5)
    cli.send_signal(signal.SIGINT)  # Ctrl-C: flushes the last final and exits 130
    # promptly, even though the pipe source has gone quiet (nothing writes the fifo now)
    try:
        cli.wait(timeout=60)
    except subprocess.TimeoutExpired:
        cli.kill()
        pytest.fail("oasr stream --mic was still running 60 s after Ctrl-C")
    reader.join(timeout=10)
    stderr = b"".join(err_lines)
    assert cli.returncode == 130, stderr.decode()[-2000:]
    assert b"listening on" in stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(r["words"] for r in rows)
    hyp = " ".join(r["text"] for r in rows)
    result = score({UTT: _reference()}, {UTT: hyp})
    assert result.wer <= 0.25, (hyp, result.wer)
    # Finals carry times on the stream's clock: the speech starts 0.5 s in.
    assert 0.3 <= rows[0]["start"] <= 1.5
