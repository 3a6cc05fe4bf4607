"""``oasr wer REF HYP``: corpus WER/CER with S/D/I, the worst utterances and an optional gate.

Exit codes: 0 scored (and the gate, if any, passed or was recorded); 1 the gate failed;
2 bad input (unreadable file, missing column, unknown normalizer, gate file problems, ``--strict``
with missing ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import typer

__all__ = ["wer_command", "EXIT_OK", "EXIT_GATE_FAILED", "EXIT_BAD_INPUT"]

EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2

ERROR_COLUMN = "error"
# The id of a NeMo manifest row (no id column): oasr transcribe ids such rows by this path.
NEMO_ID = "audio_filepath"
_ID_LIST_LIMIT = 20


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _ids(ids: list[str], limit: int = _ID_LIST_LIMIT) -> str:
    shown = ", ".join(ids[:limit])
    more = len(ids) - limit
    return f"{shown} (and {more} more; --json lists all)" if more > 0 else shown


def wer_command(
    ref: Path = typer.Argument(
        ..., help="Reference transcripts: .parquet, .jsonl or .tsv (TSV: header row of column "
        "names) with an id and a text column."),
    hyp: Path = typer.Argument(
        ..., help="Hypothesis transcripts in the same formats. A row whose 'error' column is "
        "set is scored as an empty hypothesis and listed."),
    id_column: str | None = typer.Option(
        None, "--id-column", help="Column holding the utterance id in both files (default: "
        "id, or audio_filepath in a file without an id column: a NeMo manifest, whose rows "
        "oasr transcribe ids by that path)."),
    ref_text_column: str = typer.Option(
        "text", "--ref-text-column", help="Column holding the reference text in REF."),
    hyp_text_column: str = typer.Option(
        "text", "--hyp-text-column", help="Column holding the hypothesis text in HYP."),
    normalizer: str = typer.Option(
        "whisper", "--normalizer", help="Text normalizer applied to both sides: 'whisper' "
        "(Whisper's English normalizer), 'basic' (Whisper's language-agnostic one) or 'none'."),
    worst: int = typer.Option(
        10, "--worst", min=0, help="Show this many worst utterances (by WER); 0 shows none."),
    as_json: bool = typer.Option(
        False, "--json", help="Print exactly one JSON object (rates as fractions) instead of "
        "the report."),
    strict: bool = typer.Option(
        False, "--strict", help="Refuse (exit 2) when REF ids are missing from HYP instead of "
        "scoring them as deletions."),
    gate: Path | None = typer.Option(
        None, "--gate", help="JSON gate file of recorded rates; exit 1 when this run's rate "
        "exceeds the entry's rate + tolerance. Needs --key."),
    key: str | None = typer.Option(
        None, "--key", help="Entry of the gate file to check or record."),
    record: bool = typer.Option(
        False, "--record", help="With --gate and --key: write this run's rate into the entry "
        "(created if absent; tolerance, metric and note kept) instead of checking it."),
    encoding: str = typer.Option(
        "utf-8", "--encoding", help="Text encoding of JSONL, TSV and TXT files (both REF and "
        "HYP), any Python codec name: utf-8 (default; a byte-order mark is skipped), latin-1, "
        "cp1252, utf-16, ... Parquet text is always UTF-8."),
) -> None:
    """Score HYP against REF: WER and CER with substitutions, deletions and insertions.

    Rows are joined on the id column.
    REF ids missing from HYP count as deleted references (--strict refuses instead).
    HYP ids not in REF are reported and ignored.
    A reference that normalizes to empty adds its hypothesis words as insertions.
    Exit codes: 0 scored or gate passed, 1 gate failed, 2 bad input.
    """
    from oasr.metrics.gate import GateError, check_gate, load_gate, record_gate
    from oasr.metrics.tables import MissingColumnError, TableError, read_transcripts
    from oasr.metrics.wer import EmptyReferenceError, normalizer_names, score

    if (gate is None) != (key is None):
        _fail("--gate and --key go together: pass both to check or record a gate entry")
    if record and gate is None:
        _fail("--record needs --gate FILE and --key K to know where to write the rate")
    if normalizer not in normalizer_names():
        _fail(f"unknown normalizer {normalizer!r}; valid: {', '.join(normalizer_names())}")

    text_flags = {"REF": "--ref-text-column", "HYP": "--hyp-text-column"}
    loaded = {}
    for role, path, text_column in (("REF", ref, ref_text_column), ("HYP", hyp, hyp_text_column)):
        try:
            try:
                loaded[role] = read_transcripts(
                    path, id_column=id_column or "id", text_column=text_column,
                    error_column=ERROR_COLUMN if role == "HYP" else None,
                    allow_null_text=role == "HYP", encoding=encoding)
            except MissingColumnError as e:
                if id_column is not None or e.role != "id" or NEMO_ID not in e.available:
                    raise
                loaded[role] = read_transcripts(
                    path, id_column=NEMO_ID, text_column=text_column,
                    error_column=ERROR_COLUMN if role == "HYP" else None,
                    allow_null_text=role == "HYP", encoding=encoding)
        except MissingColumnError as e:
            flag = "--id-column" if e.role == "id" else text_flags[role]
            _fail(f"{role} {e}; pass {flag} NAME")
        except TableError as e:
            _fail(f"{role} {e}")
    refs, hyps = loaded["REF"], loaded["HYP"]
    if not refs.texts:
        _fail(f"REF {ref}: the file has no rows; there is nothing to score against")

    missing = [i for i in refs.texts if i not in hyps.texts]
    if strict and missing:
        _fail(f"{len(missing)} REF ids have no row in HYP {hyp} (--strict): {_ids(missing)}")
    errored = [i for i in refs.texts if i in hyps.errors]
    hyp_texts = {i: ("" if i in hyps.errors else t) for i, t in hyps.texts.items()}

    try:
        result = score(refs.texts, hyp_texts, normalizer=normalizer)
    except EmptyReferenceError as e:
        _fail(f"REF {ref}: {e}")

    gate_info: dict[str, Any] | None = None
    gate_message = ""
    gate_failed = False
    if gate is not None and key is not None:
        try:
            if record:
                entry = record_gate(gate, key, rates={"wer": result.wer, "cer": result.cer},
                                    normalizer=normalizer)
                gate_message = (
                    f"recorded {entry.metric.upper()} {entry.error_rate_pct:.2f}% "
                    f"(tolerance {entry.tolerance_pct:.2f}%) for key {key} in {gate}")
                gate_info = {"key": key, "recorded": True, "metric": entry.metric,
                             "error_rate_pct": entry.error_rate_pct,
                             "tolerance_pct": entry.tolerance_pct}
            else:
                entry = load_gate(gate, key)
                check = check_gate(entry, key, result.rate(entry.metric), normalizer)
                gate_message = check.message
                gate_failed = not check.passed
                gate_info = {**check.to_dict(), "recorded": False}
        except GateError as e:
            _fail(str(e))

    if as_json:
        import json

        payload = result.to_dict(worst=worst)
        payload["error_ids"] = errored
        payload["ref_file"] = str(ref)
        payload["hyp_file"] = str(hyp)
        payload["gate"] = gate_info
        typer.echo(json.dumps(payload, ensure_ascii=False))
        if gate_message:
            typer.echo(gate_message, err=True)
    else:
        _print_report(result, errored, hyps.errors, worst)
        if gate_message:
            typer.echo(gate_message, err=gate_failed)
    if gate_failed:
        raise typer.Exit(EXIT_GATE_FAILED)


def _print_report(result: Any, errored: list[str], errors: dict[str, str], worst: int) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False, markup=False)
    r = result
    console.print(
        f"WER {r.wer * 100:.2f}%  (S {r.substitutions}, D {r.deletions}, I {r.insertions}; "
        f"{r.ref_words} reference words)")
    console.print(
        f"CER {r.cer * 100:.2f}%  (S {r.char_substitutions}, D {r.char_deletions}, "
        f"I {r.char_insertions}; {r.ref_chars} reference characters)")
    console.print(f"{r.utterances} utterances, normalizer {r.normalizer}")
    if r.missing_ids:
        console.print(f"{len(r.missing_ids)} REF ids have no hypothesis, scored as deleted: "
                      f"{_ids(r.missing_ids)}")
    if errored:
        shown = [f"{i} ({errors[i]})" for i in errored]
        console.print(f"{len(errored)} hypotheses carry an error, scored as empty: {_ids(shown)}")
    if r.extra_ids:
        console.print(f"{len(r.extra_ids)} HYP ids are not in REF, ignored: {_ids(r.extra_ids)}")
    rows = r.worst(worst)
    if not rows:
        return
    table = Table(title=f"{len(rows)} worst utterances")
    for name, justify in (("id", "left"), ("wer", "right"), ("ref", "left"), ("hyp", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for u in rows:
        table.add_row(Text(u.id), f"{u.wer * 100:.1f}%", Text(u.ref), Text(u.hyp))
    console.print(table)
