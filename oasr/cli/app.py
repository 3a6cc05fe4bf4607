"""The ``oasr`` Typer app: one module per command, registered here.

Commands import their heavy dependencies inside the command function so ``oasr --help`` stays
fast and works offline.
"""

from __future__ import annotations

import typer

from oasr.cli.bench import bench_command
from oasr.cli.convert import convert_command
from oasr.cli.gaps import gaps_command
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


app.command("bench")(bench_command)
app.command("convert")(convert_command)
app.command("gaps")(gaps_command)
app.command("models")(models_command)
app.command("stream")(stream_command)
app.command("transcribe")(transcribe_command)
app.command("wer")(wer_command)


def main() -> None:
    from oasr.runtime_threads import prefer_passive_wait

    # Before any command imports torch: OpenMP reads its wait policy once, at load.
    prefer_passive_wait()
    app()


if __name__ == "__main__":
    main()
