"""Where bash runs code that no command names, for the command allowlist (pure).

core/commands.py follows the programs a command starts; this module judges the words around
them that bash evaluates as code all the same. `${X:-$(cmd)}` hides a substitution that bashlex
leaves as text. Arithmetic evaluates names recursively, so `a[$(cmd)]`, even held in a variable
or read from a file, runs cmd wherever bash does arithmetic on a name: `(( ))`, subscripts,
`${x:offset}`, `${!x}`, `declare -i`/`-n`, and builtins that take a variable name (`printf -v`,
`read`, `test -v`, `unset`, `wait -p`). `${x@P}` expands a value as a prompt. And a few
variables make a shell run code at start-up (core/shell_env) or change what a program name
means (PATH, LD_*). Every check raises Refused, with the rule that decided, or returns.
"""

from __future__ import annotations

import re
from typing import Any

from warden.core.shell_env import is_shell_startup_name

__all__ = ["Refused", "check_builtin_args", "check_env_name", "check_exec_options", "check_heredoc",
           "check_parameter", "check_variable", "is_arithmetic_command"]

# Variables that change which file a program name means, or what the loader adds to it: the
# allowlist judges names as the sandbox's own PATH and loader would resolve them.
_LOOKUP_ENV = frozenset({"PATH", "GCONV_PATH"})
_LOOKUP_PREFIXES = ("LD_",)
# What a test operator takes from the word after it: `[ "$x" = y ]` cannot turn into `-v`.
_TEST_BINARY = frozenset({"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge",
                          "-nt", "-ot", "-ef", "-a", "-o"})
# Text that substitutes a command's output (or starts arithmetic) wherever bash expands.
_SUBSTITUTIONS = ("$(", "`", "$[", "<(", ">(")
# `${x@Q}` and friends only quote or change case; `${x@P}` expands x as a prompt, `$(...)` too.
_SAFE_TRANSFORMS = frozenset({"@Q", "@E", "@U", "@u", "@L", "@a", "@A", "@K", "@k"})
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\[(?:-?[0-9]+|[@*])\])?")
_PARAMETER = re.compile(r"#?([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])")


class Refused(Exception):
    """A command the allowlist refuses: the rule that decided and a one-line reason."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason


def check_env_name(name: str) -> None:
    """Refuse setting a variable that makes a shell run code at start-up or changes what a
    program name runs."""
    if is_shell_startup_name(name):
        raise Refused(f"command.env:{name}",
                      f"setting {name} makes a shell run code that cannot be checked")
    if name in _LOOKUP_ENV or name.startswith(_LOOKUP_PREFIXES):
        raise Refused(f"command.env:{name}",
                      f"setting {name} changes which program a name runs; the allowlist judges "
                      "programs as the sandbox's own PATH finds them")


def check_variable(name: str, *, assigning: bool = True) -> None:
    """A variable name a builtin or assignment acts on: plain, or with a literal index."""
    match = _VARIABLE.fullmatch(name)
    if match is None:
        raise Refused("command.shell_variable",
                      f"{name[:60]!r} is not a plain variable name; bash evaluates a subscript or "
                      "expansion there as arithmetic, where a[$(cmd)] runs cmd")
    if assigning:
        check_env_name(match.group(1))


def check_builtin_args(name: str, args: list[str]) -> None:
    """The variable names a builtin takes: bash evaluates a subscript in them (`printf -v
    'a[$(rm x)]' 1` runs rm), and `declare -i`/`-n` make later uses of a value do so."""
    if name in ("declare", "typeset", "local", "readonly", "export"):
        flags, operands = _short_options(args, "", signs="-+")
        if name != "export" and any(f in ("-i", "-n") for f, _ in flags):
            raise Refused("command.shell_variable",
                          f"{name} -i/-n makes bash evaluate values as arithmetic or names, "
                          "where a[$(cmd)] runs cmd")
        if any(f in ("-f", "-F") for f, _ in flags):
            return  # functions, by name: nothing is evaluated
        for operand in operands:
            var, _, value = operand.partition("=")
            if operand == "-" and name == "local":
                continue  # `local -` saves the shell options
            check_variable(var.removesuffix("+"))
            if value.startswith("(") and any(c in value for c in "$`["):
                raise Refused("command.shell_variable",
                              f"{name} expands the array {operand[:60]!r} again, running what "
                              "its substitutions name")
    elif name in ("read", "printf", "wait", "unset"):
        with_value = {"read": "adinNptu", "printf": "v", "wait": "p", "unset": ""}[name]
        flags, operands = _short_options(args, with_value)
        names = [value for flag, value in flags if flag in ("-a", "-v", "-p")
                 and (name != "read" or flag == "-a")]
        if name == "read":
            names += operands
        for var in names:
            check_variable(var)
        if name == "unset" and not any(f == "-f" for f, _ in flags):
            for var in operands:
                check_variable(var, assigning=False)
    elif name in ("test", "["):
        _check_test(args[:-1] if name == "[" and args[-1:] == ["]"] else args)


def _check_test(args: list[str]) -> None:
    """`test -v NAME` evaluates a subscript in NAME; so would an expansion that turns into -v."""
    for i, arg in enumerate(args[:-1]):
        if arg in ("-v", "-R"):
            check_variable(args[i + 1], assigning=False)
    if not _test_operators_fixed(args):
        raise Refused("command.shell_test",
                      "an expansion in test's operator place could become -v, which evaluates "
                      "a[$(cmd)]; split the test into simple ones ([ A ] && [ B ])")


def _test_operators_fixed(args: list[str]) -> bool:
    """True when no word that an expansion or glob may change stands where test reads an
    operator (POSIX test's argument-count rules, as bash applies them)."""
    def varies(word: str) -> bool:
        return any(c in word for c in "$`*?[")

    n = len(args)
    if n <= 1:
        return True
    if n == 2:
        return args[0] == "!" or not varies(args[0])
    if n == 3:
        if args[1] in _TEST_BINARY:
            return True
        if args[0] == "!":
            return _test_operators_fixed(args[1:])
        if args[0] == "(" and args[2] == ")":
            return True
    if n == 4:
        if args[0] == "!":
            return _test_operators_fixed(args[1:])
        if args[0] == "(" and args[3] == ")":
            return _test_operators_fixed(args[1:3])
    return not any(varies(a) for a in args)


def check_exec_options(args: list[str]) -> None:
    """`exec -l` and `exec -a -NAME` start a login shell, which sources ~/.profile (the workspace's)."""
    flags, _ = _short_options(args, "a")
    if any(f == "-l" or (f == "-a" and value.startswith("-")) for f, value in flags):
        raise Refused("command.shell_startup",
                      "exec -l or -a -NAME starts a login shell, which runs start-up files "
                      "that cannot be checked")


def _short_options(args: list[str], with_value: str,
                   signs: str = "-") -> tuple[list[tuple[str, str]], list[str]]:
    """Leading builtin options as (`-x`, value) pairs, and the operands after them."""
    flags: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return flags, args[i + 1:]
        if len(arg) < 2 or arg[0] not in signs:
            break
        for j, flag in enumerate(arg[1:], 1):
            if flag in with_value:
                value = arg[j + 1:]
                if not value and i + 1 < len(args):
                    i += 1
                    value = args[i]
                flags.append((arg[0] + flag, value))
                break
            flags.append((arg[0] + flag, ""))
        i += 1
    return flags, args[i:]


def check_parameter(source: str, start: int) -> None:
    """A parameter expansion in a script; `$x` is plain, `${...}` is checked whole."""
    if not source.startswith("${", start):
        return
    content = _braced(source, start + 2)
    if content is None:
        raise Refused("command.shell_parameter",
                      f"cannot find the end of {source[start:start + 40]!r}")
    _check_braced(content)


def _check_braced(content: str) -> None:
    """The inside of `${...}`: no substitution (bashlex leaves it as text), no arithmetic on
    names (a subscript or `${x:off}` evaluates a[$(cmd)] held in a variable), no indirection
    (`${!x}`, same) and no prompt expansion (`${x@P}` runs the `$(...)` in x's value)."""
    if any(s in content for s in _SUBSTITUTIONS):
        raise Refused("command.shell_parameter",
                      f"${{{content[:60]}}} hides a substitution that cannot be checked")
    match = _PARAMETER.match(content) if not content.startswith("!") else None
    if match is None:
        raise Refused("command.shell_parameter",
                      f"${{{content[:60]}}} is indirect or not a plain parameter; name the variable")
    name, rest = match.group(1), content[match.end():]
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0 or not re.fullmatch(r"-?[0-9]+|[@*]", rest[1:end]):
            raise Refused("command.shell_parameter",
                          f"${{{content[:60]}}}: bash evaluates the subscript as arithmetic; "
                          "use a literal index")
        rest = rest[end + 1:]
    if rest.startswith(":") and rest[1:2] not in ("-", "=", "+", "?"):
        if not re.fullmatch(r":[0-9 :+-]*", rest):
            raise Refused("command.shell_parameter",
                          f"${{{content[:60]}}}: bash evaluates the offset as arithmetic; "
                          "use literal numbers")
    elif rest.startswith("@"):
        if rest not in _SAFE_TRANSFORMS:
            raise Refused("command.shell_parameter",
                          f"${{{content[:60]}}} expands a value as a prompt, running its $(...)")
    elif rest[:1] not in ("", "-", "=", "+", "?", "#", "%", "/", "^", ",", ":"):
        raise Refused("command.shell_parameter", f"${{{content[:60]}}} is not a form Warden can check")
    if rest.lstrip(":")[:1] == "=":  # ${NAME:=value} assigns NAME
        check_env_name(name)
    i = rest.find("${")
    while i >= 0:
        nested = _braced(rest, i + 2)
        if nested is None:
            raise Refused("command.shell_parameter", f"cannot find the end of {rest[i:i + 40]!r}")
        _check_braced(nested)
        i = rest.find("${", i + 2 + len(nested))


def _braced(text: str, start: int) -> str | None:
    """The text from `start` to the `}` that closes the `${` just before it; None when unclosed.
    Quotes and backslashes hide braces, as in bash."""
    depth, i = 1, start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
        elif char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return None
            i = end + 1
        elif char == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif text.startswith("${", i):
            depth += 1
            i += 2
        else:
            if char == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i]
            i += 1
    return None


def is_arithmetic_command(node: Any) -> bool:
    """bashlex reads `((expr))` as a subshell in a subshell; bash reads `((`, unspaced, as an
    arithmetic command."""
    items = getattr(node, "list", None) or []
    if len(items) < 2 or getattr(items[1], "kind", "") != "compound":
        return False
    inner = getattr(items[1], "list", None) or []
    return (getattr(items[0], "word", "") == "(" and bool(inner)
            and getattr(inner[0], "word", "") == "(" and inner[0].pos[0] == items[0].pos[1])


def check_heredoc(node: Any) -> None:
    """A here-document with an unquoted delimiter expands `$(...)`, backquotes and `${...}` in
    its body, which bashlex leaves as plain text: such a body would run programs nobody checked."""
    delimiter = getattr(getattr(node, "output", None), "word", "")
    body = getattr(node.heredoc, "value", "")
    quoted = any(c in delimiter for c in "'\"\\")
    if quoted:
        return
    if "$(" in body or "`" in body or "$[" in body:
        raise Refused("command.heredoc_substitution",
                      "a here-document runs the commands substituted in its body, which cannot be "
                      "checked; quote its delimiter (<<'EOF') or run the programs directly")
    i = body.find("${")
    while i >= 0:
        content = _braced(body, i + 2)
        if content is None:
            raise Refused("command.heredoc_substitution", "a here-document holds an unclosed ${")
        _check_braced(content)
        i = body.find("${", i + 2 + len(content))
