"""The command allowlist, decided on the program that will really run (pure).

Seed 000 compared `command.split()[0]` with the list, so `pip; rm -rf ~` passed. Here the
decision follows argv the way the kernel and the shell would: wrappers that run another
program (`env`, `nice`, `timeout`, `xargs`, `busybox`, `find -exec`, ...) are looked
through; a path is judged by its basename and refused outside the trusted bin folders
(`/usr/bin/rm` is `rm`; `./rm` or `/tmp/python` is not a system `python`); and a shell's
`-c` script is parsed with bashlex and every command in it (pipelines, lists, `$(...)`,
`<(...)`, function bodies) must pass too. What cannot be parsed, names its program through
an expansion (`$X args`) or hides a substitution in an unquoted here-document, is refused.
This is defence in depth: the bubblewrap sandbox is the wall, the allowlist only narrows what
a bot may start inside it.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SHELLS", "CommandDecision", "check_command"]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
# Shell builtins that only act inside the shell and run no other program.
_SAFE_BUILTINS = frozenset({
    "cd", "echo", "printf", "true", "false", "test", "[", "exit", "export", "unset", "set",
    "shift", "read", "pwd", ":", "wait", "return", "local", "break", "continue", "umask",
    "declare", "typeset", "readonly", "getopts", "let", "times", "jobs", "type", "shopt",
})
# Builtins that run text as code or install code to run later: never allowed.
_CODE_BUILTINS = frozenset({"eval", "source", ".", "trap", "alias", "enable", "fc", "coproc"})
_MAX_DEPTH = 8


@dataclass(frozen=True)
class CommandDecision:
    """Allowed or refused, the rule that decided, a one-line reason, and the programs seen."""

    allowed: bool
    rule: str
    reason: str
    programs: tuple[str, ...] = ()


class _Refused(Exception):
    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


class _Checker:
    def __init__(self, allowed: Iterable[str], trusted_dirs: Iterable[str], cwd: str) -> None:
        self.allowed = frozenset(posixpath.basename(a.rstrip("/")) for a in allowed if a.strip())
        self.trusted = frozenset(posixpath.normpath(d) for d in trusted_dirs)
        self.cwd = cwd
        self.programs: list[str] = []

    # -- programs ------------------------------------------------------------------------
    def program_name(self, word: str) -> str:
        if not word or "\0" in word:
            raise _Refused("command.empty", "empty program name")
        if "/" not in word:
            return word
        full = posixpath.normpath(posixpath.join(self.cwd, word))
        folder, name = posixpath.split(full)
        if folder not in self.trusted:
            raise _Refused("command.path_outside_bins",
                           f"{word!r} is outside the trusted bin folders; call programs by name")
        return name

    def is_allowed(self, name: str) -> bool:
        if name in self.allowed:
            return True
        # python3, python3.11, pip3 count as python and pip.
        return any(re.fullmatch(re.escape(a) + r"[0-9][0-9.]*", name) for a in self.allowed)

    def require(self, name: str) -> None:
        self.programs.append(name)
        if not self.is_allowed(name):
            raise _Refused(f"command.not_allowed:{name}",
                           f"{name!r} is not in sandbox.allowed_commands")

    # -- argv ----------------------------------------------------------------------------
    def check_argv(self, argv: Sequence[str], depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            raise _Refused("command.too_deep", "commands nested too deeply to check")
        if not argv:
            raise _Refused("command.empty", "no command given")
        name = self.program_name(argv[0])
        args = list(argv[1:])
        wrapper = _WRAPPERS.get(name)
        if wrapper is not None:
            inner = wrapper(args)
            if inner is None:  # the wrapper itself does the work (`env` prints, `nice` reports)
                self.require(name)
            elif isinstance(inner, _Script):
                self.check_script(inner.text, depth + 1)
            else:
                self.check_argv(inner, depth + 1)
            return
        self.require(name)
        if name in SHELLS:
            self.check_script(_shell_script(name, args), depth + 1)
        elif name == "find":
            for command in _find_commands(args):
                self.check_argv(command, depth + 1)

    # -- shell scripts -------------------------------------------------------------------
    def check_script(self, script: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise _Refused("command.too_deep", "commands nested too deeply to check")
        try:
            import bashlex  # lazy: only shell scripts need the parser

            trees = bashlex.parse(script)
        except Exception as exc:  # bashlex raises its own errors and NotImplementedError
            raise _Refused("command.shell_unparseable",
                           f"cannot check shell script {script[:60]!r} ({type(exc).__name__}); "
                           "simplify it or run the programs directly") from None
        for tree in trees:
            self.walk(tree, depth)

    def walk(self, node: Any, depth: int) -> None:
        kind = getattr(node, "kind", "")
        if kind == "command":
            self.check_simple_command(node, depth)
        if kind == "redirect" and getattr(node, "heredoc", None) is not None:
            _check_heredoc(node)
        if kind in ("commandsubstitution", "processsubstitution"):
            self.walk(node.command, depth + 1)
            return
        for attr in ("parts", "list"):
            for child in getattr(node, attr, None) or ():
                self.walk(child, depth)
        for attr in ("command", "output"):
            child = getattr(node, attr, None)
            if child is not None and hasattr(child, "kind"):
                self.walk(child, depth)

    def check_simple_command(self, node: Any, depth: int) -> None:
        words = [p for p in node.parts if p.kind == "word"]
        if not words:
            return  # only assignments or redirections; their substitutions are walked
        program = words[0]
        if any(p.kind in ("parameter", "commandsubstitution", "processsubstitution", "tilde")
               for p in getattr(program, "parts", None) or ()):
            raise _Refused("command.dynamic_program",
                           f"the program {program.word!r} comes from an expansion; name it literally")
        argv = [w.word for w in words]
        self.check_shell_argv(argv, depth)

    def check_shell_argv(self, argv: list[str], depth: int) -> None:
        name = argv[0]
        if name in _CODE_BUILTINS:
            raise _Refused(f"command.shell_builtin:{name}",
                           f"shell builtin {name!r} runs text as code and is not allowed")
        if name in ("command", "builtin", "exec"):
            rest = _skip_options(argv[1:], with_value={"-a"} if name == "exec" else set())
            if name == "command" and any(a in ("-v", "-V") for a in argv[1:2]):
                return  # a lookup, runs nothing
            if rest:
                self.check_shell_argv(rest, depth)
            return
        if name in _SAFE_BUILTINS:
            return
        self.check_argv(argv, depth)


def _check_heredoc(node: Any) -> None:
    """A here-document with an unquoted delimiter expands `$(...)` and backquotes in its body,
    which bashlex leaves as plain text: such a body would run programs nobody checked."""
    delimiter = getattr(getattr(node, "output", None), "word", "")
    body = getattr(node.heredoc, "value", "")
    quoted = any(c in delimiter for c in "'\"\\")
    if not quoted and ("$(" in body or "`" in body):
        raise _Refused("command.heredoc_substitution",
                       "a here-document runs the commands substituted in its body, which cannot be "
                       "checked; quote its delimiter (<<'EOF') or run the programs directly")


@dataclass(frozen=True)
class _Script:
    text: str


def _skip_options(args: list[str], with_value: set[str]) -> list[str]:
    """Drop leading short/long options (and the value of those in `with_value`)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return args[i + 1:]
        if not arg.startswith("-") or arg == "-":
            break
        i += 2 if arg in with_value else 1
    return args[i:]


def _options_then(args: list[str], with_value: set[str], positionals: int = 0) -> list[str] | None:
    """Skip options (GNU style, `--opt=v` and `-xVALUE` forms), then `positionals` operands;
    what is left is the inner command, or None when there is none."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-" or _is_number_option(arg):
            if _is_number_option(arg):  # `nice -10 cmd`
                i += 1
                continue
            break
        if arg.startswith("--"):
            i += 1 if "=" in arg or arg not in with_value else 2
        else:
            i += 2 if arg in with_value else 1
    rest = args[i + positionals:]
    return rest or None


def _is_number_option(arg: str) -> bool:
    return len(arg) > 1 and arg[0] == "-" and arg[1:].isdigit()


def _env(args: list[str]) -> list[str] | _Script | None:
    i = 0
    while i < len(args):
        arg = args[i]
        split: tuple[str, list[str]] | None = None
        if arg in ("-S", "--split-string"):
            split = (args[i + 1] if i + 1 < len(args) else "", args[i + 2:])
        elif arg.startswith("--split-string="):
            split = (arg.split("=", 1)[1], args[i + 1:])
        elif arg.startswith("-S"):
            split = (arg[2:], args[i + 1:])
        if split is not None:
            try:
                return [*shlex.split(split[0]), *split[1]] or None
            except ValueError:
                raise _Refused("command.unparseable", f"cannot split env -S {split[0]!r}") from None
        if arg == "--":
            i += 1
            break
        if arg in ("-u", "--unset", "-C", "--chdir"):
            i += 2
        elif arg.startswith("-") and arg != "-":
            i += 1
        else:
            break
    while i < len(args) and "=" in args[i] and not args[i].startswith("="):
        i += 1  # NAME=VALUE assignments
    return args[i:] or None


def _xargs(args: list[str]) -> list[str]:
    rest = _options_then(args, {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file",
                                "--delimiter", "--max-args", "--max-procs", "--max-chars",
                                "--process-slot-var", "--max-lines", "--replace", "--eof"})
    return rest or ["echo"]  # xargs with no command runs echo


def _flock(args: list[str]) -> list[str] | _Script | None:
    rest = _options_then(args, {"-w", "--timeout", "-E", "--conflict-exit-code"})
    if not rest or len(rest) < 2:
        return None
    if rest[1] in ("-c", "--command"):
        return _Script(rest[2]) if len(rest) > 2 else None
    return rest[1:]


def _busybox(args: list[str]) -> list[str] | None:
    if not args or args[0].startswith("-"):
        return None
    return args


_WRAPPERS: dict[str, Any] = {
    "env": _env,
    "nice": lambda a: _options_then(a, {"-n", "--adjustment"}),
    "nohup": lambda a: _options_then(a, set()),
    "timeout": lambda a: _options_then(a, {"-s", "--signal", "-k", "--kill-after"}, positionals=1),
    "stdbuf": lambda a: _options_then(a, {"-i", "-o", "-e", "--input", "--output", "--error"}),
    "ionice": lambda a: _options_then(a, {"-c", "-n", "--class", "--classdata"}),
    "setsid": lambda a: _options_then(a, set()),
    "taskset": lambda a: _options_then(a, set(), positionals=1),
    "time": lambda a: _options_then(a, {"-f", "-o", "--format", "--output"}),
    "chrt": lambda a: _options_then(a, {"-T", "-P", "-D"}, positionals=1),
    "unbuffer": lambda a: _options_then(a, set()),
    "xargs": _xargs,
    "flock": _flock,
    "busybox": _busybox,
}


def _shell_script(name: str, args: list[str]) -> str:
    """The `-c` script of a shell invocation; refuse scripts read from files or stdin."""
    command_mode = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        if arg[:1] in ("-", "+") and len(arg) > 1:
            if arg[0] == "-" and "c" in arg[1:]:
                command_mode = True
            if "s" in arg[1:] and arg[0] == "-":
                break
            i += 1
            continue
        break
    if command_mode and i < len(args):
        return args[i]
    raise _Refused("command.shell_unchecked",
                   f"{name} would read its script from a file or stdin, which cannot be checked; "
                   f"pass it with {name} -c 'SCRIPT'")


def _find_commands(args: list[str]) -> list[list[str]]:
    """The commands of `find ... -exec CMD ... ;` (and -execdir, -ok, -okdir)."""
    commands: list[list[str]] = []
    i = 0
    while i < len(args):
        if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j] not in (";", "+"):
                j += 1
            commands.append(args[i + 1:j])
            i = j
        i += 1
    return commands


def check_command(argv: Sequence[str], allowed: Iterable[str], *, trusted_dirs: Iterable[str],
                  cwd: str) -> CommandDecision:
    """Decide whether `argv` may start: every program it would run must be allowed."""
    checker = _Checker(allowed, trusted_dirs, cwd)
    try:
        checker.check_argv(list(argv))
    except _Refused as refusal:
        return CommandDecision(False, refusal.rule, f"refused: {refusal.reason}",
                               tuple(checker.programs))
    names = tuple(dict.fromkeys(checker.programs))
    return CommandDecision(True, "command.allowed:" + ",".join(names),
                           f"allowed: {', '.join(names)}", names)
