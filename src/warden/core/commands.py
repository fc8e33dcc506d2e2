"""The command allowlist, decided on the program that will really run (pure).

Comparing `command.split()[0]` with the list would let `pip; rm -rf ~` pass. Here the
decision follows argv the way the kernel and the shell would: wrappers that run another
program (`env`, `nice`, `timeout`, `xargs`, `busybox`, `find -exec`, ...) are looked
through; a path is judged by its basename and refused outside the trusted bin folders
(`/usr/bin/rm` is `rm`; `./rm` or `/tmp/python` is not a system `python`); and a shell's
`-c` script is parsed with bashlex and every command in it (pipelines, lists, `$(...)`,
`<(...)`, function bodies) must pass too. What cannot be parsed, names its program through
an expansion (`$X args`) or hides a substitution in an unquoted here-document, is refused.

Words that bash evaluates as code without naming a program (`${X:-$(cmd)}`, `printf -v
'a[$(cmd)]'`, `(( ))`, `BASH_ENV=...`) are judged by core/shell_code. Shells that first source
files from the workspace (interactive, login, `--rcfile`, zsh) are refused, and so is input
that xargs or find splices into a command (`xargs env`, `find -exec sh -c 'echo {}'`).
This is defence in depth: the bubblewrap sandbox is the wall, the allowlist only narrows what
a bot may start inside it.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from warden.core.decisions import Decision
from warden.core.shell_code import (
    Refused,
    check_builtin_args,
    check_env_name,
    check_exec_options,
    check_heredoc,
    check_parameter,
    check_variable,
    is_arithmetic_command,
)

__all__ = ["SHELLS", "CommandDecision", "check_command"]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
# Shell builtins that only act inside the shell and run no other program.
_SAFE_BUILTINS = frozenset({
    "cd", "echo", "printf", "true", "false", "test", "[", "exit", "export", "unset", "set",
    "shift", "read", "pwd", ":", "wait", "return", "local", "break", "continue", "umask",
    "declare", "typeset", "readonly", "getopts", "times", "jobs", "type", "shopt",
})
# Builtins that run text as code or install code to run later: never allowed. `let` evaluates
# arithmetic, where `a[$(cmd)]` runs cmd; `mapfile -C CALLBACK` runs CALLBACK.
_CODE_BUILTINS = frozenset({"eval", "source", ".", "trap", "alias", "enable", "fc", "coproc",
                            "let", "mapfile", "readarray"})
_MAX_DEPTH = 8


@dataclass(frozen=True)
class CommandDecision(Decision):
    """A decision on a command line, with the programs it would run."""

    programs: tuple[str, ...] = ()


class _Checker:
    def __init__(self, allowed: Iterable[str], trusted_dirs: Iterable[str], cwd: str) -> None:
        self.allowed = frozenset(posixpath.basename(a.rstrip("/")) for a in allowed if a.strip())
        self.trusted = frozenset(posixpath.normpath(d) for d in trusted_dirs)
        self.cwd = cwd
        self.programs: list[str] = []
        # Text that xargs or find replaces with input or file names before the command runs.
        self.holes: tuple[str, ...] = ()

    # -- programs ------------------------------------------------------------------------
    def program_name(self, word: str) -> str:
        if not word or "\0" in word:
            raise Refused("command.empty", "empty program name")
        if "/" not in word:
            return word
        full = posixpath.normpath(posixpath.join(self.cwd, word))
        folder, name = posixpath.split(full)
        if folder not in self.trusted:
            raise Refused("command.path_outside_bins",
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
            raise Refused(f"command.not_allowed:{name}",
                          f"{name!r} is not in sandbox.allowed_commands")

    # -- argv ----------------------------------------------------------------------------
    def check_argv(self, argv: Sequence[str], depth: int = 0, *, fed: bool = False) -> None:
        """`fed`: xargs appends its input to argv, so argv must not end where a command goes."""
        if depth > _MAX_DEPTH:
            raise Refused("command.too_deep", "commands nested too deeply to check")
        if not argv:
            raise Refused("command.empty", "no command given")
        name = self.program_name(argv[0])
        args = list(argv[1:])
        if name == "xargs":
            command, holes = _xargs(args)
            if command is None:  # xargs with no command runs echo
                self.require("echo")
                return
            with self.filling(holes):
                self.check_argv(command, depth + 1, fed=not holes)
            return
        wrapper = _WRAPPERS.get(name)
        if wrapper is not None:
            inner = wrapper(args)
            if inner is None:  # the wrapper itself does the work (`env` prints, `nice` reports)
                if fed:
                    raise Refused("command.fed_command",
                                  f"xargs would pass its input to {name} as the command to run; "
                                  f"name the command after {name}")
                self.require(name)
            elif isinstance(inner, _Script):
                self.check_script(inner.text, depth + 1)
            else:
                self.check_argv(inner, depth + 1, fed=fed)
            return
        self.require(name)
        if name in SHELLS:
            self.check_script(_shell_script(name, args), depth + 1)
        elif name == "find":
            if fed:
                raise Refused("command.fed_command",
                              "xargs would add its input to find's expression, which may add -exec")
            with self.filling(("{}",)):
                for command in _find_commands(args):
                    self.check_argv(command, depth + 1)

    @contextmanager
    def filling(self, holes: tuple[str, ...]) -> Iterator[None]:
        outer = self.holes
        self.holes = (*outer, *holes)
        try:
            yield
        finally:
            self.holes = outer

    # -- shell scripts -------------------------------------------------------------------
    def check_script(self, script: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise Refused("command.too_deep", "commands nested too deeply to check")
        for hole in self.holes:
            if hole in script:
                raise Refused("command.script_placeholder",
                              f"{hole!r} in a shell script is replaced by input or a file name, "
                              f"which would run as code; pass it as an argument: "
                              f"sh -c '... \"$1\"' sh {hole}")
        try:
            import bashlex  # lazy: only shell scripts need the parser

            trees = bashlex.parse(script)
        except Exception as exc:  # bashlex raises its own errors and NotImplementedError
            raise Refused("command.shell_unparseable",
                          f"cannot check shell script {script[:60]!r} ({type(exc).__name__}); "
                          "simplify it or run the programs directly") from None
        for tree in trees:
            self.walk(tree, depth, script)

    def walk(self, node: Any, depth: int, source: str) -> None:
        kind = getattr(node, "kind", "")
        if kind == "command":
            self.check_simple_command(node, depth)
        elif kind == "assignment":
            name = node.word.split("=", 1)[0]
            check_variable(name.removesuffix("+"))
        elif kind == "parameter":
            check_parameter(source, node.pos[0])
        elif kind == "for":  # `for PS4 in ...` assigns PS4
            check_variable(node.parts[1].word)
        elif kind == "compound" and is_arithmetic_command(node):
            raise Refused("command.shell_arithmetic",
                          "(( )) evaluates arithmetic, where a[$(cmd)] held in a variable runs cmd; "
                          "use test or [ ] instead")
        if kind == "redirect" and getattr(node, "heredoc", None) is not None:
            check_heredoc(node)
        if kind in ("commandsubstitution", "processsubstitution"):
            self.walk(node.command, depth + 1, source)
            return
        for attr in ("parts", "list"):
            for child in getattr(node, attr, None) or ():
                self.walk(child, depth, source)
        for attr in ("command", "output"):
            child = getattr(node, attr, None)
            if child is not None and hasattr(child, "kind"):
                self.walk(child, depth, source)

    def check_simple_command(self, node: Any, depth: int) -> None:
        words = [p for p in node.parts if p.kind == "word"]
        if not words:
            return  # only assignments or redirections; their substitutions are walked
        program = words[0]
        if any(p.kind in ("parameter", "commandsubstitution", "processsubstitution", "tilde")
               for p in getattr(program, "parts", None) or ()):
            raise Refused("command.dynamic_program",
                          f"the program {program.word!r} comes from an expansion; name it literally")
        argv = [w.word for w in words]
        self.check_shell_argv(argv, depth)

    def check_shell_argv(self, argv: list[str], depth: int) -> None:
        name = argv[0]
        if name in _CODE_BUILTINS:
            raise Refused(f"command.shell_builtin:{name}",
                          f"shell builtin {name!r} runs text as code and is not allowed")
        if name in ("command", "builtin", "exec"):
            if name == "exec":
                check_exec_options(argv[1:])
            rest = _skip_options(argv[1:], with_value={"-a"} if name == "exec" else set())
            if name == "command" and any(a in ("-v", "-V") for a in argv[1:2]):
                return  # a lookup, runs nothing
            if rest:
                self.check_shell_argv(rest, depth)
            return
        if name in _SAFE_BUILTINS:
            check_builtin_args(name, argv[1:])
            return
        self.check_argv(argv, depth)


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
                return _env([*shlex.split(split[0]), *split[1]])  # -S TEXT reads as more arguments
            except ValueError:
                raise Refused("command.unparseable", f"cannot split env -S {split[0]!r}") from None
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
        check_env_name(args[i].split("=", 1)[0])  # NAME=VALUE assignments
        i += 1
    return args[i:] or None


def _xargs(args: list[str]) -> tuple[list[str] | None, tuple[str, ...]]:
    """The command xargs runs (None: echo) and the replace strings (-I R, -i, --replace) that
    it fills with its input."""
    rest = _options_then(args, {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file",
                                "--delimiter", "--max-args", "--max-procs", "--max-chars",
                                "--process-slot-var", "--max-lines", "--eof"})
    options = args[:len(args) - len(rest or [])]
    holes: list[str] = []
    for i, option in enumerate(options):
        if option == "-I" and i + 1 < len(options):
            holes.append(options[i + 1])
        elif option.startswith("-I") and len(option) > 2:
            holes.append(option[2:])
        elif option.startswith("-i") or option == "--replace":
            holes.append(option[2:] or "{}")
        elif option.startswith("--replace="):
            holes.append(option.split("=", 1)[1] or "{}")
    return rest, tuple(h for h in holes if h)


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
    "flock": _flock,
    "busybox": _busybox,
}


def _shell_script(name: str, args: list[str]) -> str:
    """The `-c` script of a shell invocation; refuse scripts read from files or stdin, and
    shells that first source start-up files (interactive, login, --rcfile; zsh's .zshenv)."""
    if name == "zsh":
        raise Refused("command.shell_startup",
                      "zsh sources ~/.zshenv (in the workspace) on every start and its syntax is "
                      "not bash's, so its scripts cannot be checked; use sh -c or bash -c")
    command_mode = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        startup = arg.split("=", 1)[0] in ("--login", "--rcfile", "--init-file", "--debugger") or (
            arg[:1] == "-" and arg[1:2] != "-" and ("i" in arg[1:] or "l" in arg[1:]))
        if startup:
            raise Refused("command.shell_startup",
                          f"{name} {arg} is an interactive or login shell, which first runs "
                          "start-up files that cannot be checked; use -c without -i or -l")
        if arg in ("-o", "+o", "-O", "+O"):
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
    raise Refused("command.shell_unchecked",
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
                  cwd: str, env: Iterable[str] = ()) -> CommandDecision:
    """Decide whether `argv` may start: every program it would run must be allowed. `env`: the
    names the run adds to the environment (PATH or LD_* there would change what runs)."""
    checker = _Checker(allowed, trusted_dirs, cwd)
    try:
        for name in env:
            check_env_name(name)
        checker.check_argv(list(argv))
    except Refused as refusal:
        return CommandDecision(False, refusal.rule, f"refused: {refusal.reason}",
                               tuple(checker.programs))
    names = tuple(dict.fromkeys(checker.programs))
    return CommandDecision(True, "command.allowed:" + ",".join(names),
                           f"allowed: {', '.join(names)}", names)
