"""Every ``oasr ...`` command shown in docs/*.md and README.md names a real subcommand and only
options that subcommand has; the cheap ones (help, listings) are run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from oasr.cli.app import app

ROOT = Path(__file__).parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# Any fenced block: most command examples sit in ```bash, some in plain ``` blocks.
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.S | re.M)
_SHELL_SPLIT = re.compile(r"&&|\|\||[|;]")
_NUMBER = re.compile(r"^-\d+(\.\d*)?$")
# Run, not only parsed: quick, and they need no input files.
_RUN = (("models",), ("gaps",))


def doc_commands() -> list[tuple[str, str]]:
    """(``file:line``, the command's text) of each ``oasr ...`` command in a fenced block."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in _FENCE.finditer(text):
            if block.group(1) not in ("", "bash", "console", "sh", "shell"):
                continue
            first = text.count("\n", 0, block.start(2)) + 1
            lines = block.group(2).split("\n")
            joined, start = "", None
            for offset, line in enumerate(lines):
                start = first + offset if start is None else start
                if line.rstrip().endswith("\\"):
                    joined += line.rstrip()[:-1] + " "
                    continue
                for piece in _SHELL_SPLIT.split(joined + line):
                    piece = piece.strip().removeprefix("$ ")
                    if piece.startswith("oasr "):
                        found.append((f"{doc.relative_to(ROOT)}:{start}", piece))
                joined, start = "", None
    return found


def _words(command: str) -> list[str]:
    """The command's arguments after ``oasr``: the comment cut off, and the ``[...]`` of a
    synopsis opened (``[--realtime]`` is the option ``--realtime``)."""
    command = re.sub(r"\s#.*$", "", command)
    command = command.replace("[", " ").replace("]", " ")
    return shlex.split(command)[1:]


def check_command(words: list[str]) -> str | None:
    """Why ``oasr <words>`` would be refused by the app's parser for a name (a subcommand or an
    option it lacks), or None. Typer's click (``typer.main.get_command``): its groups hold
    ``commands``, its parameters ``opts``/``secondary_opts`` and ``is_flag``/``count``."""
    cmd = typer.main.get_command(app)
    path = ["oasr"]
    while hasattr(cmd, "commands"):  # a group: the next word names its command
        if not words or words[0].startswith("-"):
            return None if words[:1] in ([], ["--help"]) else f"{' '.join(path)} needs a command"
        sub = cmd.commands.get(words[0])
        if sub is None:
            return f"{' '.join(path)} has no command {words[0]!r}"
        path.append(words.pop(0))
        cmd = sub
    takes_value_of: dict[str, bool] = {"--help": False}
    for param in cmd.params:
        flag = bool(getattr(param, "is_flag", False) or getattr(param, "count", False))
        for name in [*param.opts, *getattr(param, "secondary_opts", [])]:
            if name.startswith("-"):
                takes_value_of[name] = not flag
    takes_value = False
    for word in words:
        if takes_value:
            takes_value = False
            continue
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or _NUMBER.match(word):
            continue
        name, has_value = (word.split("=", 1)[0], True) if "=" in word else (word, False)
        if name not in takes_value_of:
            return f"{' '.join(path)} has no option {name}"
        takes_value = takes_value_of[name] and not has_value
    return None


COMMANDS = doc_commands()


def test_the_docs_show_commands():
    # The collection must find the examples, or every check below passes on nothing.
    assert len(COMMANDS) >= 20
    assert any(c.startswith("oasr transcribe") for _, c in COMMANDS)
    assert any(c.startswith("oasr wer") for _, c in COMMANDS)


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_each_doc_command_parses(where, command):
    problem = check_command(_words(command))
    assert problem is None, f"{where}: {command}: {problem}"


def test_a_wrong_flag_or_command_is_caught():
    assert check_command(_words("oasr transcribe a.wav --beam 5")) == (
        "oasr transcribe has no option --beam")
    assert check_command(_words("oasr transcrib a.wav")) == "oasr has no command 'transcrib'"
    assert check_command(_words("oasr transcribe a.wav -o - --temperature 0,0.2 -q")) is None
    assert check_command(_words("oasr transcribe a.wav --log-prob-threshold -1.0")) is None


@pytest.mark.parametrize("command", [c for _, c in COMMANDS if "--help" in c or " help" in c])
def test_help_examples_run(command):
    res = CliRunner().invoke(app, _words(command))
    assert res.exit_code == 0, res.output
    assert res.output.strip()


@pytest.mark.parametrize("words", _RUN, ids=[" ".join(w) for w in _RUN])
def test_listing_commands_run(words):
    # The docs send users to `oasr models` (names) and `oasr gaps` (kernels) in prose.
    res = CliRunner().invoke(app, list(words))
    assert res.exit_code == 0, res.output
    assert res.output.strip()
