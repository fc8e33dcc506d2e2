"""Entry point of `warden`: parse, dispatch, render, map errors to exit statuses.

argparse rather than Typer: Typer and click cost tens of milliseconds to import (about 85 ms
when measured), and `warden run` must start in well under 150 ms. Every command module
registers its parsers with `register(subparsers)` and handlers of the form
`handler(ctx, args) -> Output`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from warden.core import stops
from warden.core.echo import json_printable
from warden.core.errors import Refused, Terminated, WardenError, classify
from warden.interfaces.cli.output import Output, printable, terminal_columns

if TYPE_CHECKING:
    from warden.bootstrap import App

__all__ = ["EXIT_CODES", "Context", "add_workspace", "dispatch", "main", "parse_command_line", "quiet_stdout"]

# One table: error code → exit status. Scripts rely on these numbers: never renumber one.
EXIT_CODES = {
    "invalid": 2, "denied": 3, "not_found": 4, "conflict": 5, "locked": 5,
    "timeout": 1, "unavailable": 1, "internal": 1,
    "keys_mismatch": 1,  # as unavailable (its parent): this node cannot serve until given the cluster's key
    "pending": 75,  # EX_TEMPFAIL: accepted, waiting for a person's answer; ask again later
}

# Which module registers each top-level command. Only the module of the command being run
# is imported, so `warden run` does not pay for the HTTP server or the template parser;
# `--help` imports them all, an unknown word none. tests/interfaces/test_cli_table.py pins this
# table against what the modules really register.
_CLI = "warden.interfaces.cli."
COMMANDS: dict[str, str] = {
    **dict.fromkeys(("init", "config"), _CLI + "cmd_config"),
    **dict.fromkeys(("create", "list", "info", "destroy"), _CLI + "cmd_workspace"),
    "audit": _CLI + "cmd_audit",
    "fs": _CLI + "cmd_fs",
    "git": _CLI + "cmd_git",
    "sandbox": _CLI + "cmd_sandbox",
    **dict.fromkeys(("run", "with"), _CLI + "cmd_run"),
    **dict.fromkeys(("ps", "logs", "kill", "wait"), _CLI + "cmd_process"),
    "shell": _CLI + "cmd_shell",
    "forward": _CLI + "cmd_forward",
    "doctor": _CLI + "cmd_doctor",
    **dict.fromkeys(("backup", "restore"), _CLI + "cmd_backup"),
    "template": _CLI + "cmd_template",
    "snapshot": _CLI + "cmd_snapshot",
    **dict.fromkeys(("checkpoint", "checkpoints", "rollback"), _CLI + "cmd_checkpoint"),
    **dict.fromkeys(("health", "install", "suspend", "resume", "archive", "unarchive", "cleanup"),
                    _CLI + "cmd_lifecycle"),
    "bot": _CLI + "cmd_bot",
    **dict.fromkeys(("grant", "grants", "revoke"), _CLI + "cmd_grant"),
    "secret": _CLI + "cmd_secret",
    "keys": _CLI + "cmd_keys",
    **dict.fromkeys(("ws", "shell-init"), _CLI + "cmd_ws"),
    "janitor": _CLI + "cmd_janitor",
    "nodes": _CLI + "cmd_nodes",
    **dict.fromkeys(("lock", "unlock", "takeover", "locks"), _CLI + "cmd_lock"),
    **dict.fromkeys(("approvals", "approve", "deny"), _CLI + "cmd_approvals"),
    "serve": _CLI + "cmd_serve",
    "mcp": _CLI + "cmd_mcp",
    "demo": _CLI + "cmd_demo",
    "watch": _CLI + "cmd_watch",
    "completion": _CLI + "cmd_completion",
    "console": _CLI + "cmd_console",
}
MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))


class UsageError(WardenError):
    """A command line that cannot be read. `prog` is the command whose `--help` helps, with
    its placeholders (`warden fs NAME write`) until `typed` puts in the words typed."""

    code = "invalid"

    def __init__(self, message: str, *, prog: str | None = None, hint: str = "see `{prog} --help`") -> None:
        super().__init__(message)
        self.prog, self.hint = prog, hint

    def typed(self, args_list: Sequence[str]) -> UsageError:
        """The message to show: `{prog}` (and `{sub}`, prog less `warden `) as the person typed
        them, so the hint is a command that runs (`warden fs notes write --help`)."""
        if self.prog is None:
            return self
        words = self.prog.split()[1:]
        said = _positionals(args_list)[: len(words)]
        sub = " ".join(said if len(said) == len(words) else words)
        prog = f"warden {sub}".strip()
        text = f"{self.message} ({self.hint})".replace("{prog}", prog).replace("{sub}", sub + " " if sub else "")
        return UsageError(text)


def _nearest(word: str, choices: Sequence[str]) -> str | None:
    """The choice a typo most likely meant, if one is close enough."""
    import difflib

    near = difflib.get_close_matches(word, choices, n=1)
    return near[0] if near else None


# Words people bring from docker, git, the shell and Warden's own SDK (`ws.files.read`), each with
# what Warden calls it at the levels that have it: their nearest spelling is another command
# (`warden ls` was "did you mean 'logs'", `warden help` "'shell'", `fs read` and `config list` had no guess).
_WORDS_FROM_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "ls": ("list", "show"), "list": ("show", "ls"), "exec": ("run",), "new": ("create",), "status": ("info",),
    "show": ("info", "stat"),
    "rm": ("destroy",), "delete": ("rm", "destroy"), "remove": ("rm", "destroy"), "stop": ("suspend",),
    "read": ("cat",), "get": ("cat",), "put": ("write",), "move": ("mv",), "rename": ("mv",),
    "help": (),  # the line's own hint is `warden --help`
}


def _meant(word: str, choices: Sequence[str]) -> str | None:
    """The command a mistyped or borrowed word most likely meant: Warden's name for a word another
    tool uses where this level has one (and no guess by spelling for such a word), else the nearest."""
    if word in _WORDS_FROM_ELSEWHERE:
        return next((name for name in _WORDS_FROM_ELSEWHERE[word] if name in choices), None)
    return _nearest(word, choices)


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so --json still holds, and
    answers a mistyped command or option with the nearest one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Subcommands)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, prog=self.prog)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            # The top level registers only the typed command's module: offer every command.
            near = _meant(value, list(COMMANDS) if self.prog == "warden" else list(action.choices))
            guess = f"; did you mean '{{sub}}{near}'?" if near else ""
            raise UsageError(f"unknown command '{{sub}}{value}'{guess}", prog=self.prog,
                             hint="`{prog} --help` lists them")
        super()._check_value(action, value)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        known, extras = super().parse_known_args(args, namespace)
        # A subcommand takes every word after it, so words nobody took end up in the innermost
        # parser, which knows the options they were meant to be.
        if extras and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            raise self._unrecognized(list(args or ()), known, extras)
        return known, extras

    def _unrecognized(self, given: list[str], known: argparse.Namespace, extras: list[str]) -> UsageError:
        flags = given[: given.index("--")] if "--" in given else given  # after `--`, words are words
        option = next((w.partition("=")[0] for w in extras if w.startswith("-") and w in flags), None)
        if option is not None:
            # Never --help: the line already ends pointing to it, and `--label` "meaning" --help
            # (the nearest by letters) sent a person to the page rather than to the option.
            options = [o for o in self._option_string_actions
                       if o.startswith("--") == option.startswith("--") and o not in ("-h", "--help")]
            near = _nearest(option, options)
            if near:
                return UsageError(f"unknown option '{option}'; did you mean '{near}'?", prog=self.prog)
        command = getattr(known, "command", None) or [w for w in extras[:1] if not w.startswith("-")]
        if getattr(known, "takes_command", False) and command and "--" not in given:
            # `warden run W python -V`: argparse took `python` as the command and stopped at -V
            # (or, after an option, took nothing and left `python` over).
            name = getattr(known, "name", None)
            start = given.index(command[0], given.index(name) + 1 if name in given else 0)
            import shlex

            fixed = shlex.join([*given[:start], "--", *given[start:]])
            return UsageError(f"put the command after --: {{prog}} {fixed}", prog=self.prog)
        return UsageError(f"unrecognized arguments: {' '.join(extras)}", prog=self.prog)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse builds a formatter on every add_argument, and the stock one imports shutil
        # (with bz2 and lzma) just to read the terminal width: ~3 ms of every CLI start.
        # Every HelpFormatter takes width; typeshed's protocol for formatter_class names only prog.
        return self.formatter_class(prog=self.prog, width=_terminal_width())  # type: ignore[call-arg]

    def format_help(self) -> str:
        """argparse's help, then the command's examples (cli/examples.py), lines kept as written."""
        from warden.interfaces.cli.examples import examples

        lines = examples(self.prog)
        shown = "".join(f"  {line}\n" for line in lines)
        return super().format_help() + (f"\nexamples:\n{shown}" if shown else "")


def _terminal_width() -> int:
    """What argparse would wrap at: two less than the terminal's columns (80 when unknown)."""
    return max((terminal_columns() or 80) - 2, 20)


class _Subcommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose `--help` opens with their one-line `help`, unless they say more."""

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        text = kwargs.get("help")
        if kwargs.get("description") is None and text:
            kwargs["description"] = text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")
        return super().add_parser(name, **kwargs)


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

    def note(self, text: str) -> None:
        """A line for the person on stderr (none with --json: stdout then speaks for itself)."""
        if not self.json:
            sys.stderr.write(text + "\n")

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


def add_workspace(p: argparse.ArgumentParser) -> None:
    """A command's workspace: NAME, or -w/--workspace NAME, or (neither) this terminal's current
    one (`warden ws set NAME`); `main` puts the one meant in `args.name`."""
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="the workspace (default: this terminal's current one, see `warden ws set`)")
    p.add_argument("-w", "--workspace", dest="workspace_option", metavar="NAME", help="the workspace")
    p.set_defaults(uses_current=True)


def _resolve_workspace(ctx: Context, args: argparse.Namespace) -> None:
    if not getattr(args, "uses_current", False) or getattr(args, "every", False):
        return  # (`--all`: every workspace, none current)
    named, option = args.name, args.workspace_option
    if named and option and named != option:
        raise UsageError(f"two workspaces named ({named} and -w {option}): name it once")
    args.name = named or option or ctx.app.context.current_name()


def _rewritten(args_list: list[str]) -> list[str]:
    """`warden @NAME` is `warden ws set NAME` (seed 000's shortcut), after global flags too
    (`warden --home H @NAME`, as `warden --home H list` works)."""
    first = next(iter(_positionals_at(args_list)), None)
    if first is not None and first[1].startswith("@") and len(first[1]) > 1:
        at = first[0]
        return [*args_list[:at], "ws", "set", first[1][1:], *args_list[at + 1:]]
    return args_list


def _positionals_at(args_list: Sequence[str]) -> list[tuple[int, str]]:
    """The words before `--` that are not flags (nor the value of --home), with their places."""
    words: list[tuple[int, str]] = []
    skip = False
    for at, word in enumerate(args_list):
        if skip:
            skip = False
        elif word == "--home":
            skip = True
        elif word == "--":
            break
        elif not word.startswith("-"):
            words.append((at, word))
    return words


def _positionals(args_list: Sequence[str]) -> list[str]:
    """The words before `--` that are not flags (nor the value of --home): `fs notes write PATH`."""
    return [word for _, word in _positionals_at(args_list)]


def _command_word(args_list: Sequence[str]) -> str | None:
    """The first word that is not a global flag (or the value of --home)."""
    words = _positionals(args_list)
    return words[0] if words else None


def version() -> str:
    """Warden's version: the distribution's too (pyproject.toml reads it from warden/_version.py),
    so it is read without importlib.metadata, which costs every `warden --version` ~20 ms."""
    from warden._version import __version__

    return __version__


# Parsers built, by command word: a parser is used again for each command line it parses (the
# home's daemon builds `run`'s before it forks, so its children parse without building one).
_BUILT: dict[str | None, Parser] = {}


def build_parser(args_list: Sequence[str] | None = None) -> Parser:
    """The parser for `args_list`'s command alone, or for every command."""
    word = _command_word(args_list) if args_list is not None else None
    key = word if word is None or word in COMMANDS else "?"
    built = _BUILT.get(key)
    if built is None:
        built = _BUILT[key] = _build_parser(word)
    return built


def _build_parser(word: str | None) -> Parser:
    common = common_options()
    parser = Parser(prog="warden", parents=[common],
                    description="Warden: sandboxes and workspaces for AI agents.")
    parser.add_argument("--version", action="store_true", help="print Warden's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    # An unknown word needs no module: Parser._check_value names the nearest command.
    wanted = (MODULES if word is None else (COMMANDS[word],) if word in COMMANDS else ())
    for name in wanted:
        importlib.import_module(name).register(sub, common)
    return parser


def _emit_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json_printable(json.dumps(document, default=str, ensure_ascii=False)) + "\n")


def main(argv: Sequence[str] | None = None, *, settled: Callable[[int], object] | None = None) -> int:
    """Run one `warden` command; returns (and exits with) its status. `settled`, if given, is
    told the status once the command's output is written and before its state is closed (the
    home's daemon answers its client there: nothing after it is the client's to wait for)."""
    try:
        _terminate_as_interrupt()
        return _command(argv, settled)
    except KeyboardInterrupt:
        # Ctrl-C before the command took it itself: as the handlers were set up (`import signal`
        # is milliseconds of enum classes) or the command line read. Nothing ran; it was a
        # traceback. (Once main() writes its last words, the handler passes Ctrl-C over.)
        return _interrupted(None, settled)
    except Terminated as exc:
        # One that came outside the command's own unwinding: as its error or its output was
        # written, or as its last words began. It escaped as a traceback (a daemon's child, that
        # serves a client, ended with 1 and no word).
        return _terminated(None, exc, settled)


def _command(argv: Sequence[str] | None, settled: Callable[[int], object] | None) -> int:
    args_list = _rewritten(list(sys.argv[1:] if argv is None else argv))
    own = args_list[: args_list.index("--")] if "--" in args_list else args_list
    wants_json = "--json" in own
    debug = "--debug" in args_list
    ctx: Context | None = None
    if "--version" in own and _command_word(args_list) is None:  # before any command module loads
        if wants_json:
            _emit_json({"ok": True, "data": {"version": version()}})
        else:
            sys.stdout.write(f"warden {version()}\n")
        return _finish(None, 0, settled)
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
        try:
            _resolve_workspace(ctx, args)
        except WardenError as exc:
            # `warden run` without a workspace to run in refuses to start its command (126).
            raise (Refused.of(exc) if getattr(args, "takes_command", False) else exc) from None
        out = _by_cause(handler, ctx, args)
    except WardenError as exc:
        if isinstance(exc, UsageError):
            exc = exc.typed(args_list)
        if wants_json:
            _emit_json({"ok": False, "error": {"code": exc.code, "message": exc.message}})
        else:
            # Escaped: a message may name what a bot chose (a path of its approval request, which
            # `approve` repeats when carrying it out fails), and its escape sequences reached the
            # person's terminal: an OSC 52 set their clipboard, `\x1b[2K\r` rewrote the line.
            sys.stderr.write(f"{_prefix()} {printable(exc.message)}\n")
        return _finish(ctx, _exit_status(exc), settled)
    except KeyboardInterrupt:
        return _interrupted(ctx, settled)
    except Terminated as exc:
        return _terminated(ctx, exc, settled)
    except BrokenPipeError:
        quiet_stdout()
        return _finish(ctx, 1, settled)
    except Exception as exc:
        stop = stops.carried(exc)  # a stop Python wrapped (core/stops.py): said as itself
        if isinstance(stop, Terminated):
            return _terminated(ctx, stop, settled)
        if stop is not None:
            return _interrupted(ctx, settled)
        if debug:
            raise
        message = f"internal error: {type(exc).__name__}: {exc} (run again with --debug for details)"
        if wants_json:
            _emit_json({"ok": False, "error": {"code": "internal", "message": message}})
        else:
            sys.stderr.write(f"warden: {printable(message)}\n")  # (an OSError names a bot's file)
        return _finish(ctx, 1, settled)
    try:
        if wants_json:
            _emit_json({"ok": True, "data": out.data})
        elif not out.streamed:
            text = out.human()
            if text:
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return _finish(ctx, out.exit_code, settled)
    except BrokenPipeError:  # `warden list | head -1`: the reader left, which is no error of ours
        quiet_stdout()
        return _finish(ctx, out.exit_code, settled)


def _prefix() -> str:
    """`warden:` before an error, in bold red for a person at a terminal (see output.uses_colour)."""
    from warden.interfaces.cli.output import colour, styled, uses_colour

    return styled(colour("warden:", "1;31")) if uses_colour(sys.stderr) else "warden:"


def _exit_status(exc: WardenError) -> int:
    """The status `exc` ends the command with: its code's, unless its class carries its own
    (a refusal to start a command: 126, as a shell answers; a broken audit log: 1, "failed",
    though its code is `conflict`)."""
    own = getattr(type(exc), "exit_status", None)
    return own if isinstance(own, int) else EXIT_CODES.get(exc.code, 1)


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


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


def parse_command_line(args_list: Sequence[str]) -> argparse.Namespace:
    """The command line as `main` reads it (UsageError when it cannot be read): the home's daemon
    checks with it what it is asked to run."""
    return _parse(build_parser(args_list), list(args_list))


def dispatch(ctx: Context, args_list: Sequence[str]) -> Output:
    """Run one command line's handler on `ctx` as `main` would, without printing or exiting: the
    console (interfaces/console) acts through it, so each of its actions is a command a person could
    type, with the same checks. Raises WardenError (a foreign error Warden knows, mapped)."""
    args = parse_command_line(args_list)
    handler: Callable[[Context, argparse.Namespace], Output] | None = getattr(args, "handler", None)
    if handler is None:
        raise UsageError("no command given: `warden --help` lists the commands")
    ctx.args = args
    _resolve_workspace(ctx, args)
    return _by_cause(handler, ctx, args)


def _parse(parser: Parser, args_list: list[str]) -> argparse.Namespace:
    """Parse; for commands that run a program (`warden run NAME [opts] -- CMD...`), the words
    after the first `--` are that program's argv. argparse alone cannot place options between
    a positional and `--` there, so the tail is split off first."""
    first: UsageError | None = None
    if "--" in args_list:
        cut = args_list.index("--")
        try:
            args = parser.parse_args(args_list[:cut])
        except UsageError as exc:  # another command's `--` (`warden create -- NAME`): argparse's own rule
            args, first = None, exc
        if args is not None and getattr(args, "takes_command", False):
            args.command = [*args.command, *args_list[cut + 1:]]
            return args
    args = parser.parse_args(args_list)
    if first is not None and getattr(args, "takes_command", False) and not args.command:
        # `warden run -- CMD`: the workspace is missing, not the command (argparse took CMD for it).
        raise first
    return args


_TERMINATING = ("SIGTERM", "SIGHUP")
_terminated_by: list[int] = []  # the termination signal this process was stopped with, if one
_settling: list[bool] = []  # not empty once main() writes its last words (_finish)


def _terminate_as_interrupt() -> None:
    """SIGTERM and SIGHUP (a supervisor's stop, a closed terminal) raise Terminated, as Python
    raises KeyboardInterrupt for SIGINT: a run then ends its command and audits its outcome
    ("interrupted"), where the process used to vanish leaving only its intent (a `run.lost` at
    the next sweep). All three are held back while a write that must be whole is under way
    (core/stops.py). A signal some embedding program handles itself is left to it."""
    import signal

    _settling.clear()

    def terminate(signum: int, _frame: object) -> None:
        if _settling:
            # Its command is over and audited, its output written: nothing is left to unwind, and
            # raised here Terminated would escape main() (or the interpreter's shutdown, after it)
            # as a traceback. It ends with its command's status.
            return
        _terminated_by.append(signum)
        # Once: a second one must not interrupt the unwinding. Passed over by a handler, not
        # SIG_IGN: one that came with the first (SIGTERM and SIGHUP together) is already on its
        # way to a Python handler, and finding SIG_IGN there Python prints a traceback ("Signal
        # 15 ignored due to race condition"); and an ignored signal would stay ignored in every
        # program started while unwinding.
        for name in _TERMINATING:
            signal.signal(getattr(signal, name), _passed_over)
        stop = Terminated(signum, signal.Signals(signum).name)
        if not stops.held_back(stop):  # raised once a write that must be whole is done
            raise stop

    def interrupt(_signum: int, _frame: object) -> None:
        # Ctrl-C is Python's KeyboardInterrupt as before, but held back like the others while a
        # write that must be whole is under way: raised inside the transaction that gives a run's
        # lease back with its outcome, it rolled both back (the run "in progress", its lease held).
        if _settling:
            # Over, as for a termination signal: raised here it escaped main() as a traceback, or
            # cut a daemon child's last lines short (its client, told the status, hangs up at
            # once, and the daemon interrupts a child whose client has gone).
            return
        stop = KeyboardInterrupt()
        if not stops.held_back(stop):
            raise stop

    for name in _TERMINATING:
        number = getattr(signal, name)
        try:
            if signal.getsignal(number) == signal.SIG_DFL:
                signal.signal(number, terminate)
        except ValueError:  # not the main thread (an embedding program's): its signals are its own
            return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not ignored, nor an embedder's
        signal.signal(signal.SIGINT, interrupt)
    # Python's own, kept once: main() runs again in one process (tests, the console).
    printed_only = getattr(sys.unraisablehook, "printed_only", sys.unraisablehook)

    def unraisable(info: Any) -> None:
        # A handler that runs inside a weakref callback (importlib's module lock's, as a module
        # loads) or a `__del__` raises where Python can only print the stop ("Exception ignored
        # in ..."): the command went on to its end, every later SIGTERM passed over. The stop is
        # made to come again, its handler put back. From another thread: tripped from here, the
        # handler ran at once, inside this hook, where its stop is lost the same way; that
        # thread waits for this one to let go of the interpreter. Should it land in such a
        # callback again, this hook sends it once more.
        stop = stops.carried(info.exc_value)
        if stop is None:
            printed_only(info)
            return
        import _thread

        signum = stop.signum if isinstance(stop, Terminated) else int(signal.SIGINT)
        if isinstance(stop, Terminated):
            if signum in _terminated_by:
                _terminated_by.remove(signum)
            for name in _TERMINATING:
                signal.signal(getattr(signal, name), terminate)
        _thread.start_new_thread(_thread.interrupt_main, (signal.Signals(signum),))

    unraisable.printed_only = printed_only  # type: ignore[attr-defined]
    sys.unraisablehook = unraisable


def _passed_over(_signum: int, _frame: object) -> None:
    """A termination signal after the first: the run is already ending by that one."""


def _interrupted(ctx: Context | None, settled: Callable[[int], object] | None) -> int:
    sys.stderr.write("warden: interrupted\n")
    return _finish(ctx, 130, settled)


def _terminated(ctx: Context | None, exc: Terminated, settled: Callable[[int], object] | None) -> int:
    sys.stderr.write(f"warden: terminated ({exc.name})\n")
    return _finish(ctx, 128 + exc.signum, settled)


def _finish(ctx: Context | None, status: int, settled: Callable[[int], object] | None) -> int:
    _settling.append(True)
    sys.stdout.flush()
    if settled is not None:
        settled(status)
    if ctx is not None:
        ctx.close()
    return status


def run() -> NoReturn:
    status = main()
    for signum in _terminated_by:
        if status == 128 + signum:
            # Its state closed: it ends by the signal it was stopped with, as it would have
            # without the handler, so its parent (a shell, a supervisor) sees the same death.
            import signal

            sys.stdout.flush()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
    sys.exit(status)
