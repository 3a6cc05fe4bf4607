"""Untrusted checkpoints never run code or write outside their target.

For every registered converter (listed from the model registry, so a new converter without a case
fails ``test_every_registered_converter_has_a_hostile_case``), a checkpoint in its layout whose
pickle, config or header is hostile is given to ``oasr convert``, ``oasr transcribe --model`` and
``oasr.load``. Each must refuse it with exit status 2 (or a ``ValueError``) and one line naming the
file and the fix, with no sentinel file created, no probe module imported and no file written
anywhere under the test's folder. The ``.nemo`` archive cases and a bundle naming a foreign
config class are below them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.models.registry import list_models
from tests.models import hostile
from tests.models.hostile import Member

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]

CASES: dict[str, Callable[[Path, bytes], Path]] = {
    "WenetConformerConverter": hostile.wenet,
    "FunasrParaformerConverter": hostile.paraformer,
    "IcefallZipformerConverter": hostile.icefall,
    "HfWhisperConverter": hostile.whisper_hf,
    "Ct2WhisperConverter": hostile.ct2_whisper,
    "HfQwen2AudioConverter": hostile.qwen2_audio_hf,
    "HfParakeetCtcConverter": hostile.parakeet_hf("parakeet_ctc"),
    "HfParakeetRnntConverter": hostile.parakeet_hf("parakeet_rnnt"),
    "HfParakeetTdtConverter": hostile.parakeet_hf("parakeet_tdt"),
    "HfNemotronStreamingConverter": hostile.parakeet_hf("nemotron_asr_streaming"),
    "HfNemotronPromptedConverter": hostile.parakeet_hf("nemotron3_5_asr"),
    "NemoCtcConverter": hostile.nemo("ctc"),
    "NemoRnntConverter": hostile.nemo("rnnt"),
    "NemoTdtConverter": hostile.nemo("tdt"),
}
PICKLED = [name for name in CASES if name != "Ct2WhisperConverter"]
# The file each layout's payload sits in (how the refusal must name it).
PAYLOAD_FILE = {"WenetConformerConverter": "final.pt", "FunasrParaformerConverter": "model.pt",
                "IcefallZipformerConverter": "pretrained.pt", "Ct2WhisperConverter": "model.bin",
                "NemoCtcConverter": "model.nemo (member model_weights.ckpt)",
                "NemoRnntConverter": "model.nemo (member model_weights.ckpt)",
                "NemoTdtConverter": "model.nemo (member model_weights.ckpt)"}


def _registered() -> dict[str, object]:
    return {type(c).__name__: c for e in list_models() for c in e.load_converters()}


def test_every_registered_converter_has_a_hostile_case():
    assert set(_registered()) == set(CASES), "give each new converter a hostile case here"


@pytest.fixture
def arena(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the probe modules (on sys.path, so an import would succeed), the bundle
    cache and the temp folder; everything a run may touch is under it."""
    hostile.write_probe_modules(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OASR_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    sf.write(tmp_path / "in.wav", np.zeros(1600, dtype=np.float32), 16000)
    return tmp_path


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if not p.is_dir()}


def _convert(src: Path, root: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["convert", str(src), str(root / "bundle")])
    return result.exit_code, result.stderr


def _transcribe(src: Path, root: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["transcribe", str(root / "in.wav"), "--model", str(src),
                                 "-o", str(root / "out.jsonl"), "--device", "cpu"])
    return result.exit_code, result.stderr


def _load(src: Path, root: Path) -> tuple[int, str]:
    import oasr

    try:
        oasr.load(str(src), device="cpu")
    except ValueError as exc:
        return 2, f"error: {exc}"
    return 0, ""


ENTRY_POINTS = {"convert": _convert, "transcribe": _transcribe, "load": _load}


def _refused_cleanly(run: Callable[[Path, Path], tuple[int, str]], src: Path, root: Path,
                     names: str, fix: str) -> str:
    before = _files(root)
    code, err = run(src, root)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert names in lines[0] and fix in lines[0], lines[0]
    assert "Traceback" not in err
    assert not [s for s in hostile.SENTINELS if (root / s).exists()], "the payload ran"
    assert not [m for m in sys.modules
                if hostile.PROBE_MODULE in m or hostile.REMOTE_CODE_MODULE in m]
    assert _files(root) == before, "a file was written"
    assert not list((root / "tmp").iterdir()), "a temporary folder was left behind"
    return lines[0]


@pytest.mark.parametrize("converter", PICKLED)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_pickle_that_runs_code_is_refused(converter: str, entry: str, arena: Path):
    src = CASES[converter](arena / "ckpt", hostile.hostile_pickle("system", arena))
    from oasr.models.registry import detect_converter

    if converter != "IcefallZipformerConverter":  # its detection reads the refused pickle
        assert type(detect_converter(src)).__name__ == converter  # the layout is this format's
    where = PAYLOAD_FILE.get(converter, "pytorch_model.bin")
    line = _refused_cleanly(ENTRY_POINTS[entry], src, arena, where, "Re-save its tensors")
    assert "names posix.system" in line


@pytest.mark.parametrize("vector", ["exec", "import"])
@pytest.mark.parametrize("converter", ["IcefallZipformerConverter", "HfWhisperConverter",
                                       "NemoTdtConverter"])
def test_pickles_that_exec_or_import_are_refused(converter: str, vector: str, arena: Path):
    src = CASES[converter](arena / "ckpt", hostile.hostile_pickle(vector, arena))
    named = {"exec": "names exec", "import": f"names {hostile.PROBE_MODULE}.run"}
    line = _refused_cleanly(_convert, src, arena, named[vector], "Re-save its tensors")
    assert PAYLOAD_FILE.get(converter, "pytorch_model.bin") in line


@pytest.mark.parametrize("header", ["count", "size"])
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_ct2_header_that_lies_about_sizes_is_refused_without_allocating(
        header: str, entry: str, arena: Path):
    # 4 billion variables in 60 bytes, or one variable of 4 GiB - 4 that is not there
    payload = (hostile.ct2_model_bin(0xFFFFFFFF) if header == "count"
               else hostile.ct2_model_bin(1, nbytes=0xFFFFFFFC, real=False))
    src = CASES["Ct2WhisperConverter"](arena / "ckpt", payload)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    line = _refused_cleanly(ENTRY_POINTS[entry], src, arena, str(src / "model.bin"),
                            "download or convert it again")
    assert ("declares 4294967295 variables" if header == "count" else "truncated") in line
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 256 * 1024  # < 256 MB


@pytest.mark.parametrize("converter", ["WenetConformerConverter", "FunasrParaformerConverter",
                                       "NemoCtcConverter"])
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_yaml_config_with_a_python_tag_is_refused(converter: str, entry: str, arena: Path):
    src = CASES[converter](arena / "ckpt", hostile.hostile_pickle("system", arena))
    if converter == "WenetConformerConverter":
        config = src / "train.yaml"
        config.write_text(hostile.yaml_with_code(yaml_load(config), arena))
    elif converter == "FunasrParaformerConverter":
        config = src / "config.yaml"
        config.write_text(hostile.yaml_with_code(hostile.PARAFORMER_CONFIG, arena))
    else:
        text = hostile.yaml_with_code(hostile.nemo_config("ctc"), arena).encode()
        hostile.write_tar(src, [Member("./model_config.yaml", text),
                                *hostile.nemo_members("ctc", b"x")[1:]])
        config = src / "model_config.yaml"
    line = _refused_cleanly(ENTRY_POINTS[entry], src, arena, f"{config} is not valid YAML",
                            "repair or replace the file")
    assert "python/object/apply:os.system" in line


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def _subprocess(args: list[str], root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(root)]),
           "OASR_CACHE_DIR": str(root / "cache"), "TMPDIR": str(root / "tmp"),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_real_cli_refuses_an_icefall_pickle_that_runs_code(arena: Path):
    """The original report: ``oasr transcribe --model`` on an icefall folder whose
    pretrained.pt creates a file when unpickled, in a fresh process."""
    src = hostile.icefall(arena / "ckpt", hostile.hostile_pickle("system", arena))
    before = _files(arena)
    proc = _subprocess(["-m", "oasr.cli.app", "transcribe", str(arena / "in.wav"), "--model",
                        str(src), "-o", str(arena / "out.jsonl")], arena)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"{src / 'pretrained.pt'} names posix.system" in lines[0]
    assert not (arena / "ran-system").exists() and _files(arena) == before


# -- .nemo archives ------------------------------------------------------------------------------
def _nemo_with(arena: Path, *extra: Member, members: list[Member] | None = None) -> Path:
    (arena / "ckpt").mkdir()
    return hostile.write_tar(arena / "ckpt" / "model.nemo",
                             [*extra, *(members or hostile.nemo_members("ctc", b"x"))])


ESCAPES = {
    "parent": (Member("../../escaped.txt", b"x"), "is not a plain relative name"),
    "absolute": (Member("/tmp/oasr-escaped.txt", b"x"), "is not a plain relative name"),
    "symlink": (Member("./model_config.yaml", kind=tarfile.SYMTYPE, linkname="/etc/passwd"),
                "is a symbolic link"),
    "hardlink": (Member("./abc_tokenizer.model", kind=tarfile.LNKTYPE,
                        linkname="../../escaped.txt"), "is a hard link"),
    "device": (Member("./dev", kind=tarfile.CHRTYPE), "is a device or FIFO"),
    "fifo": (Member("./fifo", kind=tarfile.FIFOTYPE), "is a device or FIFO"),
}


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_nemo_member_outside_its_folder_or_not_a_file_is_refused(escape: str, entry: str,
                                                                    arena: Path):
    member, why = ESCAPES[escape]
    src = _nemo_with(arena, member)
    line = _refused_cleanly(ENTRY_POINTS[entry], src, arena, f"{src}: member {member.name!r}",
                            why)
    assert "refus" in line
    assert not Path("/tmp/oasr-escaped.txt").exists()


def test_a_nemo_member_over_its_cap_names_it_and_the_variable(arena: Path, monkeypatch):
    monkeypatch.setenv("OASR_NEMO_MAX_BYTES", "1K")
    src = _nemo_with(arena, members=hostile.nemo_members("ctc", b"\0" * 2048))
    _refused_cleanly(_convert, src, arena, "member './model_weights.ckpt' holds 2048 bytes, "
                     "over the cap of 1024", "set OASR_NEMO_MAX_BYTES")
    assert not list((arena / "tmp").iterdir()), "the partial extraction was left behind"


def test_a_nemo_config_member_over_its_cap_is_refused_unread(arena: Path):
    big = hostile.nemo_members("ctc", b"x")
    big[0] = Member("./model_config.yaml", b"#" * ((16 << 20) + 1))
    src = _nemo_with(arena, members=big)
    _refused_cleanly(_convert, src, arena, "member './model_config.yaml' holds 16777217 bytes",
                     "refusing it")


def test_a_nemo_header_record_too_large_is_refused_before_it_is_read(arena: Path):
    (arena / "ckpt").mkdir()
    src = hostile.write_tar(arena / "ckpt" / "model.nemo", hostile.nemo_members("ctc", b"x"),
                            pax={"comment": "x" * (2 << 20)})
    _refused_cleanly(_convert, src, arena, "has a tar header record of", "not a checkpoint "
                     "archive this reader accepts")


def test_a_nemo_with_too_many_members_is_refused(arena: Path):
    from oasr.models.archive import MAX_MEMBERS

    many = [Member(f"./f{i}", b"") for i in range(MAX_MEMBERS + 1)]
    src = _nemo_with(arena, *many)
    _refused_cleanly(_convert, src, arena, f"holds more than {MAX_MEMBERS} members", "refused")


def test_a_nemo_with_two_weights_members_is_refused(arena: Path):
    src = _nemo_with(arena, Member("./sub/model_weights.ckpt", b"y"))
    _refused_cleanly(_convert, src, arena, "holds two members named model_weights.ckpt",
                     "refusing to guess")


def test_members_unpacked_from_a_nemo_are_removed_at_exit(arena: Path):
    src = _nemo_with(arena)
    script = ("import sys; from oasr.models.fastconformer.nemo import read_nemo; "
              "print(read_nemo(sys.argv[1]))")
    proc = _subprocess(["-c", script, str(src)], arena)
    assert proc.returncode == 0, proc.stderr
    unpacked = Path(proc.stdout.strip())
    assert unpacked.parent == arena / "tmp" and not unpacked.exists()


def test_a_corrupt_nemo_is_one_line(arena: Path):
    (arena / "ckpt").mkdir()
    src = arena / "ckpt" / "model.nemo"
    hostile.write_tar(src, hostile.nemo_members("ctc", b"x" * 4096))
    src.write_bytes(src.read_bytes()[:3000])  # cut inside the weights member
    _refused_cleanly(_convert, src, arena, str(src), "re-create the file")


# -- bundles ------------------------------------------------------------------------------------
@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    from tests.models.test_bundle import _state, _write

    src = tmp_path / "src"
    src.mkdir()
    (src / "tokenizer.json").write_text('{"added_tokens": []}')
    return _write(tmp_path / "bundle", src, _state())


def _edit(bundle: Path, **fields: object) -> Path:
    path = bundle / "oasr_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(fields)
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("named", ["this:x", "os:system", "tests.models.hostile:_Call",
                                   "oasr.models.paraformer.config:ParaformerConfig"])
def test_a_bundle_naming_a_foreign_config_class_is_refused_unimported(named: str, bundle: Path,
                                                                       arena: Path):
    from oasr.models.bundle import BundleError, read_bundle

    sys.modules.pop("this", None)
    config = _edit(bundle, model_config_class=named)
    with pytest.raises(BundleError) as info:
        read_bundle(bundle)
    message = str(info.value)
    assert str(config) in message and repr(named) in message and "\n" not in message
    assert "convert the checkpoint again" in message
    assert "this" not in sys.modules  # "this" prints the Zen of Python on import
    line = _refused_cleanly(_transcribe, bundle, arena, str(config), "convert the checkpoint")
    assert "not the whisper config class" in line


@pytest.mark.parametrize("field, value, why", [
    ("architecture", "os", "architecture 'os' is not registered"),
    ("tokenizer_spec", {"kind": "whisper", "files": {"tokenizer_json": "../../../etc/passwd"}},
     "not a file inside tokenizer/"),
    ("tokenizer_spec", {"kind": "os:system", "files": {}}, "tokenizer kind 'os:system'"),
    ("feature_config", {"feature_type": "os:system"}, "feature_type 'os:system'"),
    ("model_config", [], "model_config is a list"),
])
def test_a_bundle_field_that_would_pick_code_or_a_file_is_refused(field, value, why, bundle):
    from oasr.models.bundle import BundleError, read_bundle

    config = _edit(bundle, **{field: value})
    with pytest.raises(BundleError, match=why) as info:
        read_bundle(bundle)
    assert str(config) in str(info.value) and "\n" not in str(info.value)


def test_resaving_a_bundle_never_copies_outside_it(bundle: Path, tmp_path: Path):
    from oasr.models.bundle import BundleError, read_bundle, write_bundle
    from oasr.tokenizers.base import TokenizerSpec

    b = read_bundle(bundle)
    with pytest.raises(ValueError, match="not a file inside"):
        record = dataclasses.replace(
            b.record(), tokenizer_spec=TokenizerSpec("whisper", {"t": "../../outside.json"}))
        write_bundle(tmp_path / "copy", record, b.load_state_dict(), b.tokenizer_dir)
    assert not (tmp_path / "outside.json").exists() and not (tmp_path / "copy").exists()
    with pytest.raises(BundleError, match="is not the whisper config class"):
        write_bundle(tmp_path / "copy", dataclasses.replace(
            b.record(), model_config={}, model_config_class="os:system"), {}, b.tokenizer_dir)
