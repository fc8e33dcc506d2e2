"""`warden completion bash|zsh|fish`: the shell's completion script, written from the parser."""

from __future__ import annotations

import argparse
from typing import Any

from warden.interfaces.cli.main import Context
from warden.interfaces.cli.output import Output

__all__ = ["register"]


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("completion", parents=[common], help="print the shell completion script (bash, zsh, fish)",
                       description="Print a completion script for your shell, made from Warden's own parser "
                                   "(every command, option and choice; workspace names as you type).")
    p.add_argument("shell", choices=["bash", "zsh", "fish"])
    p.set_defaults(handler=_completion)


def _completion(ctx: Context, args: argparse.Namespace) -> Output:
    from warden.interfaces.cli.completion import script
    from warden.interfaces.cli.main import build_parser

    text = script(build_parser(), args.shell)
    # Printed as it is: a script made of the CLI's own words (never escaped like data).
    return Output({"shell": args.shell, "script": text}, text=text)
