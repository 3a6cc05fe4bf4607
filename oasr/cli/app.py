"""The ``oasr`` Typer app: one module per command, registered here.

Commands import their heavy dependencies inside the command function so ``oasr --help`` stays
fast and works offline; every command prints its help through ``OasrCommand``
(``oasr/cli/help_format.py``: readable at 80 columns).
"""

from __future__ import annotations

import typer

from oasr.cli.bench import bench_command
from oasr.cli.convert import convert_command
from oasr.cli.gaps import gaps_command
from oasr.cli.graph import graph_command
from oasr.cli.help_format import OasrCommand
from oasr.cli.models import models_command
from oasr.cli.stream import stream_command
from oasr.cli.transcribe import transcribe_command
from oasr.cli.wer import wer_command

app = typer.Typer(
    name="oasr",
    help="OASR: GPU-first speech recognition. Batch transcription, WER, benchmarks, kernel gaps.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: see oasr/cli/help_format.py
)

def _version(value: bool) -> None:
    if value:
        from oasr import __version__

        typer.echo(f"oasr {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                 help="Print the oasr version and exit."),
) -> None:
    """OASR: GPU-first speech recognition. Batch transcription, streaming, WER, benchmarks."""


# (name, function, the one line `oasr --help` lists it with)
COMMANDS = (
    ("bench", bench_command, "RTFx, latency and memory against batch size, vs peers."),
    ("convert", convert_command, "Convert a checkpoint into a native bundle."),
    ("gaps", gaps_command, "The kernel-gap report, or one workload's dispatch."),
    ("graph", graph_command, "Build a decoding graph (lexicon x n-gram) for a CTC model."),
    ("models", models_command, "The models --model takes and the architectures."),
    ("stream", stream_command, "Stream files or a microphone: partials and finals."),
    ("transcribe", transcribe_command, "Transcribe recordings into Parquet, JSONL or TXT."),
    ("wer", wer_command, "Score hypotheses against references: WER and CER."),
)
for _name, _fn, _summary in COMMANDS:
    app.command(_name, cls=OasrCommand, short_help=_summary)(_fn)


def main() -> None:
    from oasr.runtime_threads import prefer_passive_wait

    # Before any command imports torch: OpenMP reads its wait policy once, at load.
    prefer_passive_wait()
    app()


if __name__ == "__main__":
    main()
