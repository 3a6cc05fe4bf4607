"""Where an icefall Zipformer's files are, in the layouts icefall ships them.

A recipe folder as icefall writes it (and as its Hugging Face uploads copy it)::

    exp/pretrained.pt            export.py: {"model": state_dict}
    exp/epoch-30.pt              train.py: {"model": ..., "optimizer": ..., <params>}
    exp/epoch-30-avg-9.pt        generate_averaged_model.py: {"model": state_dict}
    data/lang_bpe_500/bpe.model  sentencepiece (decode.py renders with sp.decode)
    data/lang_bpe_500/tokens.txt k2 symbols (pretrained.py joins them, "▁" -> " ")

``find_layout`` takes that folder, its ``exp`` folder, or a flat folder holding the checkpoint
beside ``bpe.model`` / ``tokens.txt``. The checkpoint: ``checkpoint_name`` when given, else
``pretrained.pt``, else the newest averaged, else the newest epoch. The tokenizer: the
``data/lang_*`` folder whose vocabulary is the checkpoint's (several matching: refused, naming
them); ``bpe.model`` when it has one (icefall's decode.py), else ``tokens.txt``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from oasr.models.safe_load import load_torch_checkpoint
from oasr.tokenizers.base import TokenizerSpec

__all__ = ["IcefallLayout", "LayoutError", "find_layout", "read_checkpoint", "vocab_size"]

PRETRAINED = "pretrained.pt"
_EPOCH = re.compile(r"^epoch-(\d+)(?:-avg-(\d+))?\.pt$")
BPE_MODEL, TOKENS = "bpe.model", "tokens.txt"


class LayoutError(ValueError):
    """The folder is an icefall layout but its files do not fit together; says which."""


@dataclass(frozen=True)
class IcefallLayout:
    """root: the folder every other path is relative to (the bundle copies the tokenizer from
    it); checkpoint: the ``.pt`` read; tokenizer: its spec (files relative to ``root``);
    others: the other checkpoints seen (``checkpoint_name`` picks one)."""

    root: Path
    checkpoint: Path
    tokenizer: TokenizerSpec
    others: tuple[str, ...] = field(default=())


_CACHE: dict[tuple[str, int, int], tuple[dict[str, torch.Tensor], dict]] = {}


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(the ``model`` state dict, the other top-level entries) of an icefall checkpoint; the
    last file read is kept (detection, configuration and weights read the same file)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _CACHE:
        ckpt = load_torch_checkpoint(path)
        if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
            raise ValueError(f"{path} has no 'model' state dict (an icefall checkpoint holds "
                             "one)")
        _CACHE.clear()
        _CACHE[key] = ckpt["model"], {k: v for k, v in ckpt.items() if k != "model"}
    return _CACHE[key]


def vocab_size(state: dict[str, torch.Tensor]) -> int | None:
    for key in ("joiner.output_linear.weight", "ctc_output.1.weight"):
        if key in state:
            return int(state[key].shape[0])
    return None


def _checkpoints(folder: Path) -> list[Path]:
    """``folder``'s icefall checkpoints, the default pick first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_file() and _EPOCH.match(p.name)]

    def rank(p: Path) -> tuple[int, int]:
        m = _EPOCH.match(p.name)
        assert m is not None
        return (1 if m.group(2) else 0, int(m.group(1)))

    found.sort(key=rank, reverse=True)
    pretrained = folder / PRETRAINED
    return ([pretrained] if pretrained.is_file() else []) + found


def _tokenizer_files(folder: Path) -> list[Path]:
    return [folder / n for n in (BPE_MODEL, TOKENS) if (folder / n).is_file()]


def _lang_vocab(folder: Path) -> int:
    """The vocabulary size a lang folder gives: the sentencepiece model's piece count, else
    the largest id in tokens.txt + 1 (icefall's ``num_tokens + 1``)."""
    if (folder / BPE_MODEL).is_file():
        import sentencepiece as spm

        return int(spm.SentencePieceProcessor(model_file=str(folder / BPE_MODEL)).get_piece_size())
    ids = [int(line.split()[-1]) for line in (folder / TOKENS).read_text(encoding="utf-8")
           .splitlines() if line.strip() and not line.split()[0].startswith("#")]
    return max(ids) + 1


def find_layout(path: Path, checkpoint_name: str | None = None) -> IcefallLayout | None:
    """The layout at ``path`` (module docstring); ``None`` when ``path`` holds no icefall
    checkpoint beside a tokenizer. Raises ``LayoutError`` when the pieces do not fit."""
    path = Path(path)
    if not path.is_dir():
        return None
    nested = sorted(p for p in path.glob("*/exp") if p.is_dir())  # icefall's egs/.../ASR
    for ckpt_dir in [path, path / "exp", *(nested if len(nested) == 1 else [])]:
        if checkpoint_name is not None:
            ckpts = [ckpt_dir / checkpoint_name] if (ckpt_dir / checkpoint_name).is_file() else []
        else:
            ckpts = _checkpoints(ckpt_dir)
        if not ckpts:
            continue
        # The tokenizer beside the checkpoint (a flat folder), else data/lang* in the folder
        # that holds exp/ (or one above: icefall's egs/<corpus>/ASR/<recipe>/exp).
        root, langs = ckpt_dir, [ckpt_dir] if _tokenizer_files(ckpt_dir) else []
        for anc in (ckpt_dir, ckpt_dir.parent, ckpt_dir.parent.parent):
            if langs:
                break
            root = anc
            langs = sorted(d for d in (anc / "data").glob("lang*")
                           if d.is_dir() and _tokenizer_files(d))
        if not langs:
            continue
        checkpoint = ckpts[0]
        lang = _pick_lang(langs, checkpoint)
        files = _tokenizer_files(lang)
        rel = files[0].relative_to(root).as_posix()
        spec = (TokenizerSpec(kind="sentencepiece", files={"model": rel})
                if files[0].name == BPE_MODEL
                else TokenizerSpec(kind="symbol_table", files={"units": rel},
                                   options={"literal_units": ["<blk>", "<unk>", "<sos/eos>"]}))
        return IcefallLayout(root=root, checkpoint=checkpoint, tokenizer=spec,
                             others=tuple(p.name for p in ckpts[1:]))
    return None


def _pick_lang(langs: list[Path], checkpoint: Path) -> Path:
    if len(langs) == 1:
        return langs[0]
    state, _ = read_checkpoint(checkpoint)
    want = vocab_size(state)
    fits = [d for d in langs if _lang_vocab(d) == want]
    if len(fits) != 1:
        seen = ", ".join(f"{d} ({_lang_vocab(d)} tokens)" for d in langs)
        raise LayoutError(f"{checkpoint} has {want} tokens; {'none' if not fits else 'several'} "
                          f"of the tokenizer folders fit: {seen}; keep only the one it was "
                          "trained with")
    return fits[0]
