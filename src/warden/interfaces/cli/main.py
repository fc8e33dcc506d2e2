"""Entry point of `warden`: parse, dispatch, render, map errors to exit statuses.

argparse rather than Typer: Typer and click cost ~85 ms to import on this machine kind and
`warden run` must start in well under 150 ms. Every command module registers its parsers
with `register(subparsers)` and handlers of the form `handler(ctx, args) -> Output`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from warden.core.errors import WardenError, classify
from warden.interfaces.cli.output import Output

if TYPE_CHECKING:
    from warden.bootstrap import App

__all__ = ["EXIT_CODES", "Context", "main"]

# One table: error code → exit status (INTERFACES.md).
EXIT_CODES = {
    "invalid": 2, "denied": 3, "not_found": 4, "conflict": 5, "locked": 5,
    "timeout": 1, "unavailable": 1, "internal": 1,
}

# Which module registers each top-level command. Only the module of the command being run
# is imported, so `warden run` does not pay for the HTTP server or the template parser;
# `--help` and unknown words import them all. tests/interfaces/test_cli_table.py pins this
# table against what the modules really register.
_CLI = "warden.interfaces.cli."
COMMANDS: dict[str, str] = {
    **dict.fromkeys(("init", "config"), _CLI + "cmd_config"),
    **dict.fromkeys(("create", "list", "info", "destroy"), _CLI + "cmd_workspace"),
    "audit": _CLI + "cmd_audit",
    "fs": _CLI + "cmd_fs",
    "sandbox": _CLI + "cmd_sandbox",
    "run": _CLI + "cmd_run",
    "doctor": _CLI + "cmd_doctor",
    **dict.fromkeys(("backup", "restore"), _CLI + "cmd_backup"),
    **dict.fromkeys(("template", "snapshot"), _CLI + "cmd_template"),
    **dict.fromkeys(("health", "install", "suspend", "resume", "archive", "unarchive", "cleanup"),
                    _CLI + "cmd_lifecycle"),
    **dict.fromkeys(("bot", "grant", "grants", "revoke", "secret"), _CLI + "cmd_keys"),
    "serve": _CLI + "cmd_serve",
    "demo": _CLI + "cmd_demo",
}
MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


class UsageError(WardenError):
    code = "invalid"


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so --json still holds."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse builds a formatter on every add_argument, and the stock one imports shutil
        # (with bz2 and lzma) just to read the terminal width: ~3 ms of every CLI start.
        # Every HelpFormatter takes width; typeshed's protocol for formatter_class names only prog.
        return self.formatter_class(prog=self.prog, width=_terminal_width())  # type: ignore[call-arg]


def _terminal_width() -> int:
    """What shutil.get_terminal_size() would say: $COLUMNS, else the terminal's, else 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns) - 2, 20)
    try:
        return max(os.get_terminal_size(sys.__stdout__.fileno()).columns - 2, 20)  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 78


class Context:
    """What a handler gets: the parsed flags and the wired App, built on first use."""

    def __init__(self, args: argparse.Namespace, environ: dict[str, str]) -> None:
        self.args = args
        self.environ = environ
        self._app: App | None = None

    @property
    def app(self) -> App:
        if self._app is None:
            from warden.bootstrap import bootstrap

            self._app = bootstrap(getattr(self.args, "home", None), environ=self.environ)
        return self._app

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


def common_options() -> argparse.ArgumentParser:
    """Flags every command accepts, before or after its own arguments."""
    parent = Parser(add_help=False)
    parent.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print exactly one JSON document on stdout")
    parent.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show a traceback on internal errors")
    parent.add_argument("--home", default=argparse.SUPPRESS,
                        help="Warden's state folder (default: $WARDEN_HOME or ~/.warden)")
    return parent


def _command_word(args_list: Sequence[str]) -> str | None:
    """The first word that is not a global flag (or the value of --home)."""
    skip = False
    for word in args_list:
        if skip:
            skip = False
        elif word == "--home":
            skip = True
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word
    return None


def build_parser(args_list: Sequence[str] | None = None) -> Parser:
    """The parser for `args_list`'s command alone, or for every command."""
    common = common_options()
    parser = Parser(prog="warden", parents=[common],
                    description="Warden: sandboxes and workspaces for AI agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    word = _command_word(args_list) if args_list is not None else None
    wanted = (COMMANDS[word],) if word is not None and word in COMMANDS else MODULES
    for name in wanted:
        importlib.import_module(name).register(sub, common)
    return parser


def _emit_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, default=str, ensure_ascii=False) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `warden` command; returns (and exits with) its status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in args_list[: args_list.index("--")] if "--" in args_list else "--json" in args_list
    debug = "--debug" in args_list
    ctx: Context | None = None
    try:
        parser = build_parser(args_list)
        args = _parse(parser, args_list)
        handler: Callable[[Context, argparse.Namespace], Output] | None = getattr(args, "handler", None)
        if handler is None:
            if wants_json:  # stdout still holds exactly one document: the usage error
                raise UsageError("no command given: `warden --help` lists the commands")
            parser.print_help(sys.stderr)
            return 2
        ctx = Context(args, dict(os.environ))
        out = _by_cause(handler, ctx, args)
    except WardenError as exc:
        if wants_json:
            _emit_json({"ok": False, "error": {"code": exc.code, "message": exc.message}})
        else:
            sys.stderr.write(f"warden: {exc.message}\n")
        # A few errors carry their own status (`warden run` refusing to start: 126).
        return _finish(ctx, getattr(exc, "exit_status", None) or EXIT_CODES.get(exc.code, 1))
    except KeyboardInterrupt:
        sys.stderr.write("warden: interrupted\n")
        return _finish(ctx, 130)
    except BrokenPipeError:
        return _finish(ctx, 1)
    except Exception as exc:
        if debug:
            raise
        message = f"internal error: {type(exc).__name__}: {exc} (run again with --debug for details)"
        if wants_json:
            _emit_json({"ok": False, "error": {"code": "internal", "message": message}})
        else:
            sys.stderr.write(f"warden: {message}\n")
        return _finish(ctx, 1)
    if wants_json:
        _emit_json({"ok": True, "data": out.data})
    elif not out.streamed:
        text = out.human()
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return _finish(ctx, out.exit_code)


def _by_cause(handler: Callable[[Context, argparse.Namespace], Output], ctx: Context,
              args: argparse.Namespace) -> Output:
    """Run `handler`; a foreign error whose cause Warden knows (a locked registry, a full disk)
    comes out as that WardenError, anything else as it was."""
    try:
        return handler(ctx, args)
    except WardenError:
        raise
    except Exception as exc:
        mapped = classify(exc)
        if mapped is None:
            raise
        raise mapped from exc


def _parse(parser: Parser, args_list: list[str]) -> argparse.Namespace:
    """Parse; for commands that run a program (`warden run NAME [opts] -- CMD...`), the words
    after the first `--` are that program's argv. argparse alone cannot place options between
    a positional and `--` there, so the tail is split off first."""
    if "--" in args_list:
        cut = args_list.index("--")
        try:
            args = parser.parse_args(args_list[:cut])
        except UsageError:  # another command's `--` (`warden create -- NAME`): argparse's own rule
            args = None
        if args is not None and getattr(args, "takes_command", False):
            args.command = [*args.command, *args_list[cut + 1:]]
            return args
    return parser.parse_args(args_list)


def _finish(ctx: Context | None, status: int) -> int:
    if ctx is not None:
        ctx.close()
    sys.stdout.flush()
    return status


def run() -> NoReturn:
    sys.exit(main())
