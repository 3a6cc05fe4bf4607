"""``RunOptions``: one set of run options for every entry point. The CLI's defaults are the
options' defaults, the API and the Ray actors take the same names, and the three give the same
rows for the same manifest and options."""

from __future__ import annotations

import dataclasses
import inspect

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.cli.transcribe import CliRun, transcribe_command
from oasr.transcribe.options import (
    CALL_OPTIONS,
    SEARCH_OPTIONS,
    DecodeOptions,
    FallbackOptions,
    ModelOptions,
    OptionsError,
    RunKeywords,
    RunOptions,
)
from tests.transcribe.conftest import clip, write_tiny_bundle

# Run options the command line spells otherwise, or leaves to the API.
NOT_CLI_FLAGS: set[str] = set()


def _typer_default(param: inspect.Parameter):
    default = param.default
    return getattr(default, "default", default)


def test_cli_defaults_are_the_run_options_defaults():
    params = inspect.signature(transcribe_command).parameters
    flat = RunOptions.flat_names()
    missing = sorted(set(flat) - set(params) - NOT_CLI_FLAGS)
    assert not missing, f"run options without a transcribe flag: {missing}"
    from_cli = RunOptions.from_flat(**{name: _typer_default(params[name])
                                       for name in flat if name in params})
    assert from_cli == RunOptions()
    # What the command line adds is CliRun's, with the same defaults.
    for f in dataclasses.fields(CliRun):
        assert f.name in params, f.name
        if f.default is not dataclasses.MISSING:
            assert _typer_default(params[f.name]) == f.default, f.name
    overlap = set(flat) & {f.name for f in dataclasses.fields(CliRun)}
    assert not overlap


def test_api_keywords_are_the_run_options():
    assert set(RunKeywords.__annotations__) == set(RunOptions.flat_names()) - {"model"}
    per_call = {f.name for cls in (DecodeOptions, FallbackOptions)
                for f in dataclasses.fields(cls)}
    assert set(CALL_OPTIONS) <= per_call


def test_flat_spellings_and_refusals():
    run = RunOptions.from_flat(temperature="0,0.2", decode_options=["beam_size=4"],
                               beam_size=2, vad="silero")
    assert run.fallback.temperature == (0.0, 0.2)
    assert run.decode.family_options() == {"beam_size": "4"}  # -d wins over --beam-size
    assert run.vad.vad == "silero"
    assert RunOptions.from_flat(**run.flat()) == run
    assert RunOptions.from_flat(temperature=0.5).fallback.temperature == (0.5,)
    with pytest.raises(TypeError, match="unknown option.*beam_sise.*valid: .*beam_size"):
        RunOptions.from_flat(beam_sise=3)
    with pytest.raises(OptionsError) as bad:
        RunOptions.from_flat(batch_size=0).validate()
    assert str(bad.value).startswith("batch_size 0: must be at least 1")
    assert bad.value.for_cli().startswith("--batch-size 0: must be at least 1")
    graph = RunOptions.from_flat(decode_method="ctc_wfst", graph="tg").validate()
    assert graph.decode.family_options() == {"graph": "tg"}
    with pytest.raises(OptionsError, match="graph tg: .*--decode-method ctc_wfst"):
        RunOptions.from_flat(graph="tg").validate()
    for kw in ({"device": "tpu"}, {"dtype": "fp8"}, {"threads": 0}, {"beam_size": 0},
               {"max_new_tokens": 0}, {"no_speech_threshold": 2.0}, {"emit": ["bogus"]}):
        with pytest.raises(OptionsError):
            RunOptions.from_flat(**kw).validate()


def test_search_option_spellings_and_refusals():
    assert RunOptions().decode.suppress_tokens == (-1,)
    for given, held in (("-1,50362", (-1, 50362)), ("", ()), (None, ()), ([7, 8], (7, 8)),
                        (-1, (-1,))):
        assert RunOptions.from_flat(suppress_tokens=given).decode.suppress_tokens == held
    run = RunOptions.from_flat(hotwords=["a b", "c"], prefix="So", best_of=3)
    assert run.decode.hotwords == ("a b", "c")
    assert RunOptions.from_flat(**run.flat()) == run
    search = run.decode.search_options()
    assert set(search) == set(SEARCH_OPTIONS) and search["prefix"] == "So"
    from oasr.engine.request import DecodingOptions

    DecodingOptions(**search).validate()  # every field is the request's, under its name
    refusals = {"best_of": 0, "patience": 0.0, "repetition_penalty": 0.0,
                "no_repeat_ngram_size": -1, "suppress_tokens": "-2",
                "hotwords_score": 1.0}
    for name, value in refusals.items():
        with pytest.raises(OptionsError) as bad:
            RunOptions.from_flat(**{name: value}).validate()
        assert bad.value.option == name and "\n" not in str(bad.value)
    with pytest.raises(OptionsError, match="add --hotwords"):
        RunOptions.from_flat(hotwords_score=2.0).validate()
    with pytest.raises(OptionsError, match="^suppress_tokens 'a': expected token ids"):
        RunOptions.from_flat(suppress_tokens="a")


def test_quantization_and_compute_type():
    """--compute-type is faster-whisper's spelling of --quantization with --dtype."""
    assert RunOptions().model.quantization_and_dtype() == ("none", "auto")
    assert RunOptions.from_flat(quantization="int8").model.quantization_and_dtype() == (
        "int8", "auto")
    assert RunOptions.from_flat(compute_type="int8_float16").model.quantization_and_dtype() == (
        "int8", "fp16")
    assert RunOptions.from_flat(compute_type="float32", dtype="fp32").model \
        .quantization_and_dtype() == ("none", "fp32")
    for kw, option in (({"quantization": "int4"}, "quantization"),
                       ({"compute_type": "int16"}, "compute_type"),
                       ({"compute_type": "int8", "quantization": "fp8"}, "compute_type"),
                       ({"compute_type": "int8_float16", "dtype": "bf16"}, "compute_type")):
        with pytest.raises(OptionsError) as bad:
            RunOptions.from_flat(**kw).validate()
        assert bad.value.option == option, kw


@pytest.fixture(scope="module")
def entry_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("entry")
    bundle = write_tiny_bundle(root / "tiny", window_s=6.0)
    broken = root / "broken.flac"
    broken.write_bytes(b"not audio\n" * 50)
    rows = [{"id": "a", "audio": str(clip("1688-142285-0002"))},
            {"id": "b", "audio": "broken.flac"},
            {"id": "c", "audio": str(clip("1688-142285-0003"))}]
    manifest = root / "m.parquet"
    pq.write_table(pa.Table.from_pylist(rows), manifest)
    return root, bundle, manifest


def _compare(rows):
    return [(r["id"], r["text"], r["finish_reason"], r["language"], r["error"] is None,
             [(w["word"], w["start"], w["end"]) for w in r["words"] or []]) for r in rows]


def test_entry_points_give_the_same_rows(entry_setup):
    """CLI, API and the Ray actor class on one manifest, with options off their defaults (the
    tiny model stops after one token; a cap of 1 shows as finish_reason length)."""
    import oasr
    from oasr.integrations.ray import Transcriber

    root, bundle, manifest = entry_setup
    # Sampling is seeded by row id, which the API numbers itself: greedy here.
    options = {"max_new_tokens": 1, "no_speech_threshold": 0.5,
               "compression_ratio_threshold": 1.2, "language_check": False,
               "repetition_penalty": 1.3, "suppress_tokens": (-1, 262),
               "hotwords": "Helstone"}
    out = root / "cli.parquet"
    result = CliRunner().invoke(app, [
        "transcribe", str(manifest), "-o", str(out), "--model", str(bundle), "--device", "cpu",
        "--threads", "1", "--no-progress", "--max-new-tokens", "1", "--no-speech-threshold",
        "0.5", "--compression-ratio-threshold", "1.2", "--no-language-check",
        "--repetition-penalty", "1.3", "--suppress-tokens", "-1,262",
        "--hotwords", "Helstone"])
    assert result.exit_code == 0, result.output
    cli_rows = pq.read_table(out).to_pylist()

    model = oasr.load(str(bundle), device="cpu", threads=1, **options)
    api_rows = []
    for t in model.transcribe_batch([clip("1688-142285-0002"), root / "broken.flac",
                                     clip("1688-142285-0003")]):
        api_rows.append({"id": "abc"[t.index], "text": t.text if not t.error else None,
                         "finish_reason": t.finish_reason, "language": t.language,
                         "error": t.error,
                         "words": [{"word": w.word, "start": w.start, "end": w.end}
                                   for w in t.words] or None})
    ray_rows = Transcriber(str(bundle), device="cpu", threads=1, folder=str(root),
                           **options)(pq.read_table(manifest)).to_pylist()

    assert [r["finish_reason"] for r in cli_rows] == ["length", None, "length"]
    assert _compare(cli_rows) == _compare(ray_rows)
    assert _compare(cli_rows) == _compare(api_rows)


def test_entry_points_take_the_quantization(entry_setup):
    """--quantization / compute_type reaches the engine from the CLI, the API and Ray alike."""
    import oasr
    from oasr.integrations.ray import Transcriber

    root, bundle, manifest = entry_setup
    out = root / "cli-int8.parquet"
    result = CliRunner().invoke(app, [
        "transcribe", str(manifest), "-o", str(out), "--model", str(bundle), "--device", "cpu",
        "--threads", "1", "--no-progress", "--max-new-tokens", "1", "--compute-type", "int8"])
    assert result.exit_code == 0, result.output
    assert pq.read_metadata(out).metadata[b"quantization"] == b"int8 (absmax)"
    model = oasr.load(str(bundle), device="cpu", threads=1, compute_type="int8")
    assert model.engine.quantization.spec.method == "int8"
    assert model.engine.quantization.quantized
    actor = Transcriber(str(bundle), device="cpu", threads=1, folder=str(root),
                        quantization="int8-weight")
    assert actor.session.engine.quantization.spec.method == "int8-weight"
    bad = CliRunner().invoke(app, [
        "transcribe", str(manifest), "-o", str(root / "x.parquet"), "--model", str(bundle),
        "--quantization", "int4"])
    assert bad.exit_code == 2
    assert "--quantization int4: unknown quantization" in bad.output


def test_the_device_check_counts_devices_only_for_an_index_past_the_first(monkeypatch):
    import torch

    counted = []

    def count() -> int:
        counted.append(1)
        return 2

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", count)
    ModelOptions(device="cuda").check_device()
    ModelOptions(device="cuda:0").check_device()
    assert counted == []  # is_available already says there is a first device
    ModelOptions(device="cuda:1").check_device()
    with pytest.raises(OptionsError, match="cuda:0 to cuda:1"):
        ModelOptions(device="cuda:2").check_device()
    assert counted
