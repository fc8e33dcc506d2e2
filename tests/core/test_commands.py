"""The command allowlist decides on the program that will really run."""

from __future__ import annotations

import pytest

from warden.core.commands import check_command

ALLOWED = ["pip", "python", "git", "sh", "bash", "ls", "echo", "find", "cat", "node"]
WS = "/ws/demo"
TRUSTED = ["/usr/bin", "/bin", "/usr/local/bin", f"{WS}/.venv/bin", f"{WS}/node_modules/.bin"]


def decide(*argv: str):  # type: ignore[no-untyped-def]
    return check_command(list(argv), ALLOWED, trusted_dirs=TRUSTED, cwd=WS)


@pytest.mark.parametrize("argv", [
    ("pip", "install", "requests"),
    ("python3.11", "-V"),
    ("/usr/bin/python3", "-V"),
    (f"{WS}/.venv/bin/python", "-m", "pytest"),
    (".venv/bin/pip", "list"),
    ("env", "-i", "A=1", "python", "-c", "1"),
    ("nice", "-n", "5", "git", "status"),
    ("timeout", "-s", "KILL", "30", "pip", "install", "x"),
    ("xargs", "-n1", "echo"),
    ("sh", "-c", "ls | cat && git status; echo $(python -V)"),
    ("bash", "-ec", "for f in a b; do echo $f; done"),
    ("sh", "-c", "command -v rm"),
    ("find", ".", "-name", "*.py", "-exec", "cat", "{}", ";"),
    ("sh", "-c", "cat <<EOF\nplain $HOME text\nEOF"),
])
def test_allowed(argv: tuple[str, ...]) -> None:
    decision = decide(*argv)
    assert decision.allowed, decision.reason
    assert decision.rule.startswith("command.allowed")


@pytest.mark.parametrize(("argv", "rule"), [
    (("rm", "-rf", "x"), "command.not_allowed:rm"),
    (("/usr/bin/rm", "x"), "command.not_allowed:rm"),
    (("/bin/../usr/bin/rm", "x"), "command.not_allowed:rm"),
    (("env", "rm", "x"), "command.not_allowed:rm"),
    (("env", "-u", "HOME", "FOO=1", "rm", "x"), "command.not_allowed:rm"),
    (("env", "-S", "rm -rf x"), "command.not_allowed:rm"),
    (("env", "--split-string=rm x"), "command.not_allowed:rm"),
    (("nice", "-10", "rm"), "command.not_allowed:rm"),
    (("nohup", "rm", "x"), "command.not_allowed:rm"),
    (("timeout", "5", "rm", "x"), "command.not_allowed:rm"),
    (("stdbuf", "-oL", "rm", "x"), "command.not_allowed:rm"),
    (("xargs", "-I", "{}", "rm", "{}"), "command.not_allowed:rm"),
    (("xargs",), "command.allowed"),  # runs echo, which is allowed: checked below
    (("busybox", "rm", "x"), "command.not_allowed:rm"),
    (("flock", "/tmp/l", "-c", "rm x"), "command.not_allowed:rm"),
    (("find", ".", "-exec", "rm", "{}", "+"), "command.not_allowed:rm"),
    (("sh", "-c", "ok; rm x"), "command.not_allowed:ok"),
    (("sh", "-c", "ls; rm x"), "command.not_allowed:rm"),
    (("sh", "-c", "ls && rm x"), "command.not_allowed:rm"),
    (("sh", "-c", "ls | rm x"), "command.not_allowed:rm"),
    (("sh", "-c", "echo $(rm x)"), "command.not_allowed:rm"),
    (("sh", "-c", "echo `rm x`"), "command.not_allowed:rm"),
    (("bash", "-c", "cat <(rm x)"), "command.not_allowed:rm"),
    (("sh", "-c", "X=$(rm x) ls"), "command.not_allowed:rm"),
    (("sh", "-c", "if true; then rm x; fi"), "command.not_allowed:rm"),
    (("sh", "-c", "f() { rm x; }; f"), "command.not_allowed:rm"),
    (("sh", "-c", "sh -c 'rm x'"), "command.not_allowed:rm"),
    (("sh", "-c", "exec rm x"), "command.not_allowed:rm"),
    (("sh", "-c", "eval 'rm x'"), "command.shell_builtin:eval"),
    (("sh", "-c", ". ./evil.sh"), "command.shell_builtin:."),
    (("sh", "-c", "$CMD x"), "command.dynamic_program"),
    (("sh", "-c", "[[ -f x ]]"), "command.shell_unparseable"),
    # A here-document's body is expanded by the shell but is plain text to the parser.
    (("sh", "-c", "python -c 1 <<EOF\n$(rm x)\nEOF"), "command.heredoc_substitution"),
    (("sh", "-c", "cat <<-EOF\n\t`rm x`\nEOF\nls"), "command.heredoc_substitution"),
    (("sh", "-c", "cat <<EOF\n${X:-$(rm x)}\nEOF"), "command.heredoc_substitution"),
    (("sh", "script.sh"), "command.shell_unchecked"),
    (("bash",), "command.shell_unchecked"),
    (("bash", "-s"), "command.shell_unchecked"),
    (("./python",), "command.path_outside_bins"),
    (("/tmp/pip", "install"), "command.path_outside_bins"),
    (("/usr/bin/../../tmp/pip",), "command.path_outside_bins"),
    (("",), "command.empty"),
])
def test_refused(argv: tuple[str, ...], rule: str) -> None:
    decision = decide(*argv)
    if rule == "command.allowed":
        assert decision.allowed and decision.programs == ("echo",)
        return
    assert not decision.allowed
    assert decision.rule == rule
    assert decision.reason.startswith("refused: ") and "\n" not in decision.reason


def test_empty_argv_and_deep_nesting() -> None:
    assert not check_command([], ALLOWED, trusted_dirs=TRUSTED, cwd=WS).allowed
    nested = ["env"] * 20 + ["ls"]
    assert decide(*nested).rule == "command.too_deep"


def test_allowlist_entries_may_be_paths() -> None:
    d = check_command(["rm", "x"], ["/usr/bin/rm"], trusted_dirs=TRUSTED, cwd=WS)
    assert d.allowed
