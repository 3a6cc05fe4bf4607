"""Hostile checkpoints: each registered format's layout, carrying a payload that tries to run
code, create a file, import a module or escape its folder when the checkpoint is read.

Every payload, if it ever ran, leaves a trace the tests look for: a sentinel file beside the
checkpoint folder, or a probe module in ``sys.modules`` (whose import also writes a sentinel).
The layouts are the least each converter needs to detect the folder and reach the payload
(configs by hand, no model is built).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

WENET_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "wenet_tiny" / "u2pp_conv2d4"
PROBE_MODULE = "oasr_hostile_probe"  # a module a pickle names; importing it writes a sentinel
REMOTE_CODE_MODULE = "modeling_hostile"  # what a config.json auto_map points at
SENTINELS = ("ran-system", "ran-exec", "ran-import", "ran-remote-code", "ran-yaml")
PICKLE_VECTORS = ("system", "exec", "import")


class _Call:
    """Pickles as "call ``fn(*args)``" (what a malicious ``__reduce__`` does)."""

    def __init__(self, fn: Callable[..., object], *args: object) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.fn, self.args


def write_probe_modules(root: Path) -> None:
    """The modules a payload would import, in ``root`` (which the test puts on sys.path)."""
    for name, sentinel in ((PROBE_MODULE, "ran-import"), (REMOTE_CODE_MODULE, "ran-remote-code")):
        (root / f"{name}.py").write_text(
            f"open({str(root / sentinel)!r}, 'w').close()\n"
            "def run(*args):\n    return None\n"
            "class Model:\n    pass\n", encoding="utf-8")


def hostile_pickle(vector: str, root: Path) -> bytes:
    """A torch checkpoint (``torch.save`` zip) holding a state dict and a call that, unpickled
    by ``torch.load(weights_only=False)``, would run: ``system`` a shell command creating
    ``root/ran-system``; ``exec`` Python creating ``root/ran-exec``; ``import`` a function of
    the probe module (its import creates ``root/ran-import``)."""
    if vector == "exec":
        call = _Call(exec, f"open({str(root / 'ran-exec')!r}, 'w').close()")
    else:
        call = _Call(os.system, f"touch '{root / 'ran-system'}'")
    buf = io.BytesIO()
    torch.save({"model": {"encoder_embed.out.weight": torch.zeros(2, 2)}, "hook": call}, buf)
    if vector != "import":
        return buf.getvalue()
    # Name the probe module instead of os.system (pickling it here would import it).
    return rename_global(buf.getvalue(), "posix.system", f"{PROBE_MODULE}.run")


def rename_global(checkpoint: bytes, old: str, new: str) -> bytes:
    """A ``torch.save`` zip whose pickle names global ``new`` where it named ``old``
    (``module.name``), for names that cannot be pickled here."""
    def opcode(dotted: str) -> bytes:
        module, _, name = dotted.rpartition(".")
        return f"c{module}\n{name}\n".encode()

    src, out = zipfile.ZipFile(io.BytesIO(checkpoint)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith("data.pkl"):
                assert opcode(old) in data
                data = data.replace(opcode(old), opcode(new))
            dst.writestr(item, data)
    return out.getvalue()


def yaml_with_code(config: dict, root: Path) -> str:
    """``config`` as YAML plus a key whose value ``yaml.load`` (not ``safe_load``) would build
    by running a shell command."""
    tag = f"!!python/object/apply:os.system [\"touch '{root / 'ran-yaml'}'\"]"
    return yaml.safe_dump(config) + f"hook: {tag}\n"


def remote_code_config(config: dict) -> dict:
    """A config.json that asks transformers to import the folder's own model code."""
    return {**config, "auto_map": {"AutoModel": f"{REMOTE_CODE_MODULE}.Model",
                                   "AutoConfig": f"{REMOTE_CODE_MODULE}.Model"},
            "trust_remote_code": True}


# -- layouts: (folder or file, payload) -> the source path ---------------------------------------
def _hf_folder(folder: Path, config: dict, payload: bytes, **extra: object) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(remote_code_config(config)))
    shutil.copy(folder.parent / f"{REMOTE_CODE_MODULE}.py", folder)
    for name, content in extra.items():
        (folder / name.replace("__", ".")).write_text(json.dumps(content))
    (folder / "pytorch_model.bin").write_bytes(payload)
    return folder


WHISPER_CONFIG = {"model_type": "whisper", "vocab_size": 64, "num_mel_bins": 8, "d_model": 16,
                  "encoder_layers": 1, "encoder_attention_heads": 2, "decoder_layers": 1,
                  "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32,
                  "max_source_positions": 10, "max_target_positions": 16,
                  "decoder_start_token_id": 60, "eos_token_id": 59, "pad_token_id": 59}
PARAKEET_ENCODER = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                    "intermediate_size": 32, "num_mel_bins": 8, "subsampling_conv_channels": 4}
QWEN_TOKENS = {"added_tokens": [{"id": 90 + i, "content": t} for i, t in enumerate(
    ("<|AUDIO|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_bos|>",
     "<|audio_eos|>"))]}


def whisper_hf(folder: Path, payload: bytes) -> Path:
    return _hf_folder(folder, WHISPER_CONFIG, payload,
                      generation_config__json={"no_timestamps_token_id": 61})


def parakeet_hf(model_type: str) -> Callable[[Path, bytes], Path]:
    def build(folder: Path, payload: bytes) -> Path:
        return _hf_folder(folder, {"model_type": model_type, "vocab_size": 8,
                                   "encoder_config": PARAKEET_ENCODER}, payload)
    return build


def qwen2_audio_hf(folder: Path, payload: bytes) -> Path:
    config = {"model_type": "qwen2_audio", "audio_token_index": 90,
              "audio_config": {"num_mel_bins": 8, "d_model": 16, "encoder_layers": 1,
                               "encoder_attention_heads": 2, "encoder_ffn_dim": 32,
                               "max_source_positions": 10},
              "text_config": {"vocab_size": 96, "hidden_size": 16, "intermediate_size": 32,
                              "num_hidden_layers": 1, "num_attention_heads": 2,
                              "num_key_value_heads": 1, "eos_token_id": 91}}
    return _hf_folder(folder, config, payload, tokenizer__json=QWEN_TOKENS)


def wenet(folder: Path, payload: bytes) -> Path:
    folder.mkdir(parents=True)
    for name in ("train.yaml", "units.txt", "global_cmvn"):
        shutil.copy(WENET_FIXTURE / name, folder / name)
    (folder / "final.pt").write_bytes(payload)
    return folder


PARAFORMER_CONFIG = {"model": "Paraformer", "encoder": "SANMEncoder",
                     "decoder": "ParaformerSANMDecoder", "predictor": "CifPredictorV2",
                     "encoder_conf": {"output_size": 16, "attention_heads": 2,
                                      "linear_units": 24, "num_blocks": 1},
                     "decoder_conf": {"attention_heads": 2, "linear_units": 24, "num_blocks": 1},
                     "frontend_conf": {"n_mels": 8, "lfr_m": 7, "lfr_n": 6}}


def paraformer(folder: Path, payload: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(PARAFORMER_CONFIG))
    (folder / "tokens.json").write_text(json.dumps(["<blank>", "<s>", "</s>", "a", "<unk>"]))
    (folder / "model.pt").write_bytes(payload)
    return folder


def icefall(folder: Path, payload: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "tokens.txt").write_text("<blk> 0\na 1\n<unk> 2\n")
    (folder / "pretrained.pt").write_bytes(payload)
    return folder


def nemo_config(head: str) -> dict:
    labels = ["a", "b", "c"]
    cfg: dict = {"labels": labels, "encoder": {"feat_in": 8, "n_layers": 1, "d_model": 16,
                                               "n_heads": 2, "subsampling_conv_channels": 4},
                 "decoder": {"vocabulary": labels}}
    if head != "ctc":
        cfg["decoder"] = {"prednet": {"pred_hidden": 8, "pred_rnn_layers": 1}}
        cfg["joint"] = {"jointnet": {"joint_hidden": 8}}
    if head == "tdt":
        cfg["loss"] = {"loss_name": "tdt"}
    return cfg


@dataclass(frozen=True)
class Member:
    """One tar member: a regular file (``data``) or a special entry (``kind``)."""

    name: str
    data: bytes = b""
    kind: bytes = tarfile.REGTYPE
    linkname: str = ""
    size: int | None = None  # declared size, when it should differ from len(data)


def write_tar(path: Path, members: list[Member], pax: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers=pax) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.linkname = m.kind, m.linkname
            info.size = len(m.data) if m.kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(m.data) if m.kind == tarfile.REGTYPE else None)
    return path


def nemo_members(head: str, weights: bytes) -> list[Member]:
    return [Member("./model_config.yaml", yaml.safe_dump(nemo_config(head)).encode()),
            Member("./model_weights.ckpt", weights),
            Member("./abc_tokenizer.model", b"not a sentencepiece model")]


def nemo(head: str) -> Callable[[Path, bytes], Path]:
    def build(folder: Path, payload: bytes) -> Path:
        folder.mkdir(parents=True)
        return write_tar(folder / "model.nemo", nemo_members(head, payload))
    return build


def ct2_model_bin(variables: int, nbytes: int = 4, real: bool = True) -> bytes:
    """A CTranslate2 header naming WhisperSpec that declares ``variables`` variables, the first
    ``nbytes`` long; ``real``: its bytes are really there (else the header lies)."""
    def string(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return len(raw).to_bytes(2, "little") + raw

    head = (6).to_bytes(4, "little") + string("WhisperSpec") + (1).to_bytes(4, "little")
    head += variables.to_bytes(4, "little")
    var = string("encoder/conv1/weight") + bytes([1]) + (nbytes // 4).to_bytes(4, "little")
    var += bytes([0]) + nbytes.to_bytes(4, "little")
    return head + var + (b"\0" * nbytes if real else b"")


def ct2_whisper(folder: Path, payload: bytes) -> Path:
    """A faster-whisper folder whose model.bin header claims 4 GiB of tensors in a few bytes
    and whose config.json asks for remote code."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(remote_code_config({})))
    shutil.copy(folder.parent / f"{REMOTE_CODE_MODULE}.py", folder)
    (folder / "model.bin").write_bytes(payload)
    return folder
