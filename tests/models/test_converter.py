"""The converter base: config files that exist but do not parse are errors naming the file."""

from __future__ import annotations

import json

import pytest

from oasr.models.converter import CorruptCheckpointFileError, read_json
from oasr.models.whisper.converters import HfWhisperConverter


def test_read_json_absent_is_none_corrupt_is_an_error(tmp_path):
    assert read_json(tmp_path / "config.json") is None
    (tmp_path / "config.json").write_text('{"model_type": "whisper",')
    with pytest.raises(CorruptCheckpointFileError, match=r"config\.json is not valid JSON"):
        read_json(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(CorruptCheckpointFileError, match=r"config\.json holds a JSON list"):
        read_json(tmp_path / "config.json")
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert read_json(tmp_path / "config.json") == {"a": 1}


def test_hf_whisper_refuses_a_corrupt_config_or_generation_config(tmp_path):
    conv = HfWhisperConverter()
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CorruptCheckpointFileError, match="config.json"):
        conv.detect(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "whisper",
                                                      "vocab_size": 64}))
    (tmp_path / "generation_config.json").write_text('{"decoder_start_token_id": ')
    # A corrupt file is refused by name, never read as absent (no guessed ids).
    with pytest.raises(CorruptCheckpointFileError, match="generation_config.json"):
        conv.build_config(tmp_path)
