"""``oasr transcribe --vad``: the flag's errors and a gated run through the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from tests.transcribe.conftest import SAMPLE_RATE, clip, write_wav

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_thread")



def _transcribe(bundle: Path, *args: object):
    return runner.invoke(app, ["transcribe", *map(str, args), "--model", str(bundle),
                               "--no-progress"])


def test_unknown_detector_and_missing_weights_exit_2_naming_the_fix(bundle, tmp_path):
    wav = write_wav(tmp_path / "a.wav", np.zeros(SAMPLE_RATE, np.float32))
    result = _transcribe(bundle, wav, "-o", tmp_path / "o.parquet", "--vad", "bogus")
    assert result.exit_code == 2
    assert "silero" in result.output and "fsmn" in result.output
    result = _transcribe(bundle, wav, "-o", tmp_path / "o.parquet", "--vad", "silero",
                         "--vad-model-dir", tmp_path)
    assert result.exit_code == 2 and "--vad-model-dir" in " ".join(result.output.split())
    result = _transcribe(bundle, wav, "-o", tmp_path / "o.parquet", "--vad", "ctc_blank")
    assert result.exit_code == 2 and "presegment" in result.output


def test_vad_run_gates_silence_and_keeps_speech(bundle, tmp_path):
    pytest.importorskip("silero_vad")
    silent = write_wav(tmp_path / "silent.wav", np.zeros(4 * SAMPLE_RATE, np.float32))
    speech = clip("1688-142285-0005")
    out = tmp_path / "o.parquet"
    result = _transcribe(bundle, silent, speech, "-o", out, "--vad", "silero")
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in pq.read_table(out).to_pylist()}
    assert rows["silent"]["text"] == "" and rows["silent"]["finish_reason"] == "no_speech"
    assert rows["1688-142285-0005"]["text"]
    assert pq.read_schema(out).metadata[b"vad"] == b"silero"
