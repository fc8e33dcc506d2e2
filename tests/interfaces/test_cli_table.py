"""main.COMMANDS names, for each top-level command, the module that registers it."""

from __future__ import annotations

import argparse
import importlib

from warden.interfaces.cli import main


def _registered(module_name: str) -> set[str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(module_name).register(sub, main.common_options())
    return set(sub.choices)


def test_every_command_is_in_the_table_with_its_module() -> None:
    seen: dict[str, str] = {}
    for module in main.MODULES:
        for command in _registered(module):
            seen[command] = module
    assert seen == main.COMMANDS


def test_only_the_invoked_module_is_imported() -> None:
    parser = main.build_parser(["run", "x", "--", "true"])
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert set(choices) == {"run", "with"}  # the one module that registers both
    assert set(main.build_parser(["--help"])._subparsers._group_actions[0].choices) == set(main.COMMANDS)  # type: ignore[union-attr]
