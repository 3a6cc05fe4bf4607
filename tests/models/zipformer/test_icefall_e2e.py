"""icefall Zipformer end to end against icefall's own recipes, through the user path.

Each fixture (``tests/fixtures/icefall_zipformer/<variant>/``, written by its ``make.py`` with
icefall's code) is a random checkpoint in a layout icefall ships (``exp/pretrained.pt`` or
``exp/epoch-N.pt`` with the training params, ``data/lang_bpe_N/bpe.model`` and / or
``tokens.txt``, once inside icefall's ``egs/.../ASR`` tree) and ``expected.json``: what icefall's
decode.py / streaming_decode.py decode from five LibriSpeech utterances (lhotse's fbank, each
utterance alone), token ids and text.

Here ``oasr convert`` runs on the layout as the fixture says a user would point at it, then
``oasr transcribe`` (and ``oasr stream`` for the causal ones) on the same audio files with
default flags or the recorded ``-d`` options. The text must equal icefall's (``sp.decode``
with a bpe.model, pretrained.py's symbol join with tokens.txt; leading and trailing spaces
aside, as every oasr text is stripped), and the token ids, read from the engine inside those
very CLI runs (``ASREngine.run``'s outputs; the chunk-wise policy's search at each final),
exactly. fp32, CPU.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from oasr.cli.app import app
from tests.helpers.data import SHARED_DATA
from tests.helpers.upstream_e2e import full_fp32

# ~30 s on one core: 5 conversions, 20 transcribe and 3 stream runs over 18 s of audio each.
pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "icefall_zipformer"
VARIANTS = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())
AUDIO = SHARED_DATA / "librispeech-test-other-70" / "audio"

runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))


def _audio(utt: str) -> Path:
    path = AUDIO / f"{utt}.flac"
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine (shared data)")
    return path


@pytest.fixture(scope="module", params=VARIANTS)
def converted(request, tmp_path_factory) -> tuple[dict[str, Any], Path, Path]:
    """(expected.json, the bundle, a manifest of the audio) for one variant."""
    name = request.param
    expected = json.loads((FIXTURES / name / "expected.json").read_text(encoding="utf-8"))
    work = tmp_path_factory.mktemp(name)
    layout = work / "layout"
    shutil.copytree(FIXTURES / name, layout, ignore=shutil.ignore_patterns("expected.json"))
    src, *flags = expected["convert"]
    flags = [str(layout / f) if f.endswith(".json") else f for f in flags]
    bundle = work / "bundle"
    result = runner.invoke(app, ["convert", str(layout / src), str(bundle), *flags])
    assert result.exit_code == 0, result.output
    manifest = work / "audio.jsonl"
    manifest.write_text("".join(json.dumps({"id": u, "audio": str(_audio(u))}) + "\n"
                                for u in expected["utterances"]), encoding="utf-8")
    return expected, bundle, manifest


def _options(flags: list[str]) -> tuple[str | None, dict[str, str]]:
    """The decode method and -d options of a recorded flag list."""
    method, options = None, {}
    for flag, value in zip(flags[::2], flags[1::2]):
        if flag == "--decode-method":
            method = value
        else:
            assert flag == "-d", flags
            key, _, val = value.partition("=")
            options[key] = val
    return method, options


def _decodes(expected: dict[str, Any], command: str) -> list[str]:
    return [k for k, d in expected["decodes"].items() if d["command"] == command]


def _spy_transcribe(monkeypatch) -> dict[str, list[int]]:
    """Token ids of each row the CLI's engine decodes (``ASREngine.run``'s outputs; the rows
    are whole utterances, one window each)."""
    from oasr.engine.engine import ASREngine

    seen: dict[str, list[int]] = {}
    run = ASREngine.run

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN202
        for out in run(self, *args, **kwargs):
            row, _, window = out.request_id.partition("\x1f")
            assert window in ("", "w0"), out.request_id
            seen[row] = list(out.token_ids)
            yield out

    monkeypatch.setattr(ASREngine, "run", spy)
    return seen


def _spy_stream(monkeypatch) -> dict[int, list[int]]:
    """Token ids of each stream's final, by stream id (a final's result carries text only:
    the chunk-wise policy's search is read as the final is made)."""
    from oasr.streaming.chunkwise import ChunkwisePolicy

    seen: dict[int, list[int]] = {}
    finalize = ChunkwisePolicy._finalize

    def spy(self, s, st, *args):  # noqa: ANN001, ANN202
        seen[s.id] = list(st.search.best().tokens)
        return finalize(self, s, st, *args)

    monkeypatch.setattr(ChunkwisePolicy, "_finalize", spy)
    return seen


def _check_transcribe(converted, tmp_path, monkeypatch, device: list[str]) -> None:
    expected, bundle, manifest = converted
    ids = _spy_transcribe(monkeypatch)
    names = _decodes(expected, "transcribe")
    assert names
    for name in names:
        decode = expected["decodes"][name]
        out = tmp_path / f"{name}.jsonl"
        ids.clear()
        result = runner.invoke(app, ["transcribe", str(manifest), "-o", str(out), "-f", "jsonl",
                                     "--model", str(bundle), "--no-progress", *device,
                                     *decode["flags"]])
        assert result.exit_code == 0, result.output
        rows = {r["id"]: r for r in map(json.loads, out.read_text("utf-8").splitlines())}
        want = {u: r["text"].strip() for u, r in decode["results"].items()}
        assert {u: rows[u]["text"] for u in want} == want, name
        assert ids == {u: r["token_ids"] for u, r in decode["results"].items()}, name


def test_transcribe_equals_icefall_decode(converted, tmp_path, monkeypatch) -> None:
    # the device is named so that a CUDA machine runs this one on the CPU too (auto: fp16)
    _check_transcribe(converted, tmp_path, monkeypatch, ["--device", "cpu"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_transcribe_on_cuda_fp32_equals_icefall_decode(converted, tmp_path, monkeypatch) -> None:
    """The same decodes on the GPU in fp32: the CUDA fbank kernels (centred frames gathered by
    ``snip_input``), the encoder and the searches on the device. cuDNN's TF32 convolutions
    (torch's default) are off, as icefall's decodes were recorded in full fp32."""
    full_fp32("cuda", monkeypatch)
    _check_transcribe(converted, tmp_path, monkeypatch, ["--device", "cuda", "--dtype", "fp32"])


def test_stream_equals_icefall_streaming_decode(converted, tmp_path, monkeypatch) -> None:
    expected, bundle, _ = converted
    ids = _spy_stream(monkeypatch)
    names = _decodes(expected, "stream")
    if not names:
        pytest.skip("not causal: icefall has no streaming decode for it")
    utts = expected["utterances"]
    for name in names:
        decode = expected["decodes"][name]
        out = tmp_path / f"{name}.jsonl"
        ids.clear()
        result = runner.invoke(app, ["stream", *map(str, map(_audio, utts)), "--model",
                                     str(bundle), "--device", "cpu", "--no-endpoint", "--vad",
                                     "energy", "-o", str(out), *decode["flags"]])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
        got = {Path(r["source"]).stem: r["text"] for r in rows}
        want = {u: r["text"].strip() for u, r in decode["results"].items()}
        assert got == want, name
        # streams are opened in the order of the files given
        assert dict(zip(utts, (ids[k] for k in sorted(ids)))) == {
            u: r["token_ids"] for u, r in decode["results"].items()}, name
