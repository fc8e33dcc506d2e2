"""Every command's --help says what it does in a line and shows how it is typed."""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from contextlib import redirect_stdout

import pytest

from tests.conftest import Cli
from warden.interfaces.cli import main
from warden.interfaces.cli.examples import EXAMPLES


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from _parsers(child)


def _argv(prog: str) -> list[str]:
    """The words that reach the command `prog` names (`warden fs NAME write` → fs notes write)."""
    return [word if word != "NAME" else "notes" for word in prog.split()[1:]]


PROGS = [p.prog for p in _parsers(main.build_parser())]


def test_every_command_is_walked_and_every_example_belongs_to_one() -> None:
    assert len(PROGS) > 50 and "warden fs NAME write" in PROGS
    assert {p.removeprefix("warden").strip() for p in PROGS} == set(EXAMPLES)


@pytest.mark.parametrize("prog", PROGS)
def test_help_has_a_description_and_an_example(prog: str) -> None:
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main.main([*_argv(prog), "--help"])
    assert exited.value.code == 0
    text = out.getvalue()
    usage, _, rest = text.partition("\n\n")
    description = rest.split("\n\n")[0]
    assert usage.startswith("usage: ") and description and not description.startswith(("positional", "options"))
    examples = text.split("\nexamples:\n")[1].splitlines()
    assert examples and all(line.startswith("  ") and "warden " in line for line in examples)


def test_create_help_through_the_cli(cli: Cli) -> None:
    result = cli("create", "--help")
    assert result.code == 0
    assert "\nCreate a workspace.\n" in result.stdout
    assert "\nexamples:\n  warden create notes\n" in result.stdout
    nested = cli("fs", "notes", "write", "--help")
    assert nested.stdout.startswith("usage: warden fs NAME write ")
    assert "\nReplace a file with standard input.\n" in nested.stdout
    assert "echo hi | warden fs notes write /hello.txt" in nested.stdout
