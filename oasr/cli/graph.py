"""``oasr graph build``: a TLG decoding graph for a CTC model (``oasr.graphs.recipe``), saved
beside its bundle and used by ``oasr transcribe --decode-method ctc_wfst --graph NAME``."""

from __future__ import annotations

import json

import typer

ACTIONS = ("build",)


def graph_command(
    action: str = typer.Argument(..., metavar="ACTION", help="build: make a TLG graph."),
    model: str = typer.Option(..., "--model", "-m",
                              help="The CTC model: a bundle, checkpoint folder or catalogue "
                                   "name (its units and tokenizer spell the words)."),
    name: str = typer.Option("tg", help="The graph's name (graphs/NAME.fst in the bundle)."),
    arpa: str | None = typer.Option(None, help="An ARPA n-gram model (KenLM lmplz, SRILM "
                                               "ngram-count, or a build's --arpa-out)."),
    text: str | None = typer.Option(None, help="Or text to estimate one from (interpolated "
                                               "Kneser-Ney), one sentence per line."),
    order: int = typer.Option(3, help="--text: the n-gram order."),
    case: str = typer.Option("keep", help="--text: keep, upper or lower case its words first "
                                          "(upper for upper-case BPE models)."),
    lexicon: str | None = typer.Option(None, help="WORD unit unit ... lines (default: each "
                                                  "word spelt by the model's tokenizer)."),
    units: str | None = typer.Option(None, help="--lexicon: the unit table it is spelt in "
                                                "(tokens.txt: NAME ID lines)."),
    output_dir: str | None = typer.Option(None, "--output-dir", "-o",
                                          help="Write the graph here instead of the bundle."),
    arpa_out: str | None = typer.Option(None, help="--text: also write the estimated ARPA."),
    as_json: bool = typer.Option(False, "--json", help="Print the build report as JSON."),
) -> None:
    """Build a decoding graph (CTC topology x lexicon x n-gram) for a CTC model."""
    if action not in ACTIONS:
        typer.echo(f"error: unknown action {action!r}; use: {', '.join(ACTIONS)}", err=True)
        raise typer.Exit(2)
    from oasr.graphs.arpa import ArpaError
    from oasr.graphs.lexicon import LexiconError
    from oasr.graphs.recipe import GraphRecipe, build_model_graph
    from oasr.graphs.store import GraphError

    recipe = GraphRecipe(model=model, name=name, arpa=arpa, text=text, order=order, case=case,
                         lexicon=lexicon, units=units, output_dir=output_dir, arpa_out=arpa_out)
    try:
        built = build_model_graph(recipe)
    except (ValueError, OSError, ArpaError, LexiconError, GraphError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    report = {"graph": str(built.path), **built.report,
              "unspellable_examples": built.unspellable[:10]}
    if as_json:
        typer.echo(json.dumps(report))
        return
    typer.echo(f"wrote {built.path}")
    for key, value in report.items():
        if key != "graph":
            typer.echo(f"  {key}: {value}")
