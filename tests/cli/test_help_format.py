"""Every command's help at 80 columns: option names whole, named metavars, no line past 80;
``-d help`` the same."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from oasr.cli.app import app
from oasr.cli.help_format import type_metavar, wrap

runner = CliRunner()
ENV = {"COLUMNS": "80"}
GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)
# A Python annotation printed as a metavar: <str>, <int range>, <list[str]>, {inputs}
PYTHON_TYPE = re.compile(r"<(str|int|float|bool|path|file|list\[[^>]*\])( range)?>|\blist\[|"
                         r"\{[a-z_]+\}")


def _help(*argv: str) -> str:
    result = runner.invoke(app, [*argv, "--help"], env=ENV)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_commands_are_all_checked():
    assert {"bench", "convert", "gaps", "models", "stream", "transcribe", "wer"} <= set(COMMANDS)


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_help_fits_80_columns_with_named_metavars(name):
    text = _help(*([name] if name else []))
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, f"lines past 80 columns: {long}"
    assert "…" not in text
    assert not PYTHON_TYPE.search(text), PYTHON_TYPE.search(text).group(0)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_name_is_printed_whole(name):
    text = _help(name)
    command = GROUP.commands[name]
    for param in command.params:
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), (name, opt)
        if param.metavar and not getattr(param, "is_flag", False):
            assert param.metavar in text, (name, param.name, param.metavar)


def test_arguments_and_options_get_named_metavars():
    transcribe = GROUP.commands["transcribe"]
    by_name = {p.name: p for p in transcribe.params}
    assert by_name["inputs"].metavar == "INPUTS"
    assert by_name["batch_size"].metavar == "INT"
    assert by_name["no_speech_threshold"].metavar == "FLOAT"
    assert by_name["decode_options"].metavar == "TEXT"  # a list option: its item's
    assert "Usage: " in _help("transcribe") and "[OPTIONS] INPUTS..." in _help("transcribe")
    convert = {p.name: p for p in GROUP.commands["convert"].params}
    assert convert["dtype"].metavar == "float16|bfloat16|float32"
    assert GROUP.commands["wer"].params[0].metavar == "REF"


def test_decode_option_help_fits_80_columns_and_lists_every_option():
    from oasr.cli.decoding_flags import family_options_table

    result = runner.invoke(app, ["transcribe", "-d", "help"], env=ENV)
    assert result.exit_code == 0, result.output
    long = [line for line in result.output.splitlines() if len(line) > 80]
    assert not long, long
    for row in family_options_table():
        if row["option"] != "(none)":
            assert f"  {row['option']}: {row['type']} = {row['default']}" in result.output


def test_wrap_breaks_between_words_only():
    text = "exit 1 with --fail-on-error set and a --compression-ratio-threshold above"
    lines = wrap(text, 24, 2)
    assert all(len(line) <= 24 or " " not in line.strip() for line in lines)
    words = " ".join(line.strip() for line in lines).split()
    assert words == text.split()  # nothing cut inside a word or an option name
    assert wrap("a\n\nb", 80) == ["a", "", "b"]
    assert wrap("\b\nkeep   this\n  as is", 80, 2) == ["  keep   this", "    as is"]


def test_an_option_type_without_a_name_is_refused():
    class Odd:
        pass

    class Param:
        class type_descriptor:  # noqa: N801  (stands in for Typer's descriptor)
            is_choice = is_path = is_tuple = is_list = False
            annotation = Odd

    with pytest.raises(TypeError, match="declare one"):
        type_metavar(Param())
