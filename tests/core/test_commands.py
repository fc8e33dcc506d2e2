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


# -- bash runs code where no command is written -------------------------------------------

@pytest.mark.parametrize(("script", "rule"), [
    # Substitutions inside ${...} stay plain text to bashlex.
    ("echo ${X:-$(rm x)}", "command.shell_parameter"),
    ('echo "${X:-`rm x`}"', "command.shell_parameter"),
    ("cat ${X:-<(rm x)}", "command.shell_parameter"),
    ("echo ${X:->(rm x)}", "command.shell_parameter"),
    ("echo ${X:-$((1+$(rm x)))}", "command.shell_parameter"),
    # Arithmetic on names evaluates a[$(cmd)] held in a variable (or read from a file).
    ("echo ${y:-${a[i]}}", "command.shell_parameter"),
    ("echo ${s:i}", "command.shell_parameter"),
    ("echo ${!x}", "command.shell_parameter"),
    ("echo ${x@P}", "command.shell_parameter"),
    ("cat <<EOF\n${a[i]}\nEOF", "command.shell_parameter"),
    ("cat <<EOF\n$[i]\nEOF", "command.heredoc_substitution"),
    ("printf -v 'a[$(rm x)]' 1", "command.shell_variable"),
    ("printf -va[$i] 1", "command.shell_variable"),
    ("declare 'a[$(rm x)]=1'", "command.shell_variable"),
    ("typeset -i n", "command.shell_variable"),
    ("f() { local -n ref=a; }", "command.shell_variable"),
    ('export "$x=1"', "command.shell_variable"),
    ('readonly "$x"', "command.shell_variable"),
    ("declare -a 'a=($(rm x))'", "command.shell_variable"),
    ("let x=1", "command.shell_builtin:let"),
    ("((x=1))", "command.shell_arithmetic"),
    ("test -v 'a[$(rm x)]'", "command.shell_variable"),
    ('[ -v "$name" ]', "command.shell_variable"),
    ('[ "$op" "$name" ]', "command.shell_test"),
    ("read 'a[$(rm x)]'", "command.shell_variable"),
    ('read -a "$name"', "command.shell_variable"),
    ("unset 'a[$(rm x)]'", "command.shell_variable"),
    ("wait -p 'a[$(rm x)]'", "command.shell_variable"),
    ("mapfile -C 'rm x' -c 1 a", "command.shell_builtin:mapfile"),
    ("readarray a", "command.shell_builtin:readarray"),
    ("source ./x", "command.shell_builtin:source"),
    # Start-up variables, however a script sets them.
    ("BASH_ENV=./x bash -c ls", "command.env:BASH_ENV"),
    ("export BASH_ENV=./x; bash -c ls", "command.env:BASH_ENV"),
    ("declare -x PROMPT_COMMAND=x", "command.env:PROMPT_COMMAND"),
    ("PS4='$(rm x)'; set -x; ls", "command.env:PS4"),
    ("for PS4 in '$(rm x)'; do set -x; ls; done", "command.env:PS4"),
    ("read PS4 <f", "command.env:PS4"),
    ("echo ${BASH_ENV:=./x}", "command.env:BASH_ENV"),
    ("PATH=.:$PATH ls", "command.env:PATH"),
    ("LD_PRELOAD=./x.so ls", "command.env:LD_PRELOAD"),
    # Login shells source ~/.profile, in the workspace.
    ("exec -l bash -c ls", "command.shell_startup"),
    ("exec -a -bash bash -c ls", "command.shell_startup"),
])
def test_hidden_code_in_scripts_is_refused(script: str, rule: str) -> None:
    decision = decide("bash", "-c", script)
    assert (decision.allowed, decision.rule) == (False, rule), decision.reason
    assert "\n" not in decision.reason


@pytest.mark.parametrize("argv", [
    ("bash", "-i", "-c", "ls"), ("bash", "-ic", "ls"), ("bash", "-li", "-c", "ls"),
    ("bash", "-l", "-c", "ls"), ("bash", "--login", "-c", "ls"), ("sh", "-i", "-c", "ls"),
    ("bash", "--rcfile", "./rc", "-c", "ls"), ("bash", "--init-file=./rc", "-c", "ls"),
    ("zsh", "-c", "ls"),
])
def test_shells_that_source_start_up_files_are_refused(argv: tuple[str, ...]) -> None:
    decision = check_command(list(argv), [*ALLOWED, "zsh"], trusted_dirs=TRUSTED, cwd=WS)
    assert (decision.allowed, decision.rule) == (False, "command.shell_startup")


@pytest.mark.parametrize(("argv", "rule"), [
    (("env", "BASH_ENV=./x", "bash", "-c", "ls"), "command.env:BASH_ENV"),
    (("env", "ENV=./x", "sh", "-c", "ls"), "command.env:ENV"),
    (("env", "BASH_FUNC_ls%%=() { rm x; }", "bash", "-c", "ls"), "command.env:BASH_FUNC_ls%%"),
    (("env", "PS4=$(rm x)", "SHELLOPTS=xtrace", "bash", "-c", "ls"), "command.env:PS4"),
    (("env", "SSH_CLIENT=1", "bash", "-c", "ls"), "command.env:SSH_CLIENT"),
    (("env", "-S", "BASH_ENV=./x bash -c ls"), "command.env:BASH_ENV"),
    (("env", "PATH=.", "ls"), "command.env:PATH"),
    (("env", "LD_PRELOAD=./x.so", "ls"), "command.env:LD_PRELOAD"),
    # xargs and find put input and file names into the command.
    (("xargs", "env"), "command.fed_command"),
    (("xargs", "nice"), "command.fed_command"),
    (("xargs", "timeout", "5"), "command.fed_command"),
    (("xargs", "find", "."), "command.fed_command"),
    (("xargs", "-I{}", "sh", "-c", "echo {}"), "command.script_placeholder"),
    (("xargs", "-I", "X", "sh", "-c", "echo X"), "command.script_placeholder"),
    (("find", ".", "-exec", "sh", "-c", "cat {}", ";"), "command.script_placeholder"),
])
def test_start_up_variables_and_spliced_input_are_refused(argv: tuple[str, ...], rule: str) -> None:
    decision = check_command(list(argv), [*ALLOWED, "env", "nice", "timeout"], trusted_dirs=TRUSTED,
                             cwd=WS)
    assert (decision.allowed, decision.rule) == (False, rule), decision.reason


@pytest.mark.parametrize("name", ["BASH_ENV", "PATH", "LD_LIBRARY_PATH"])
def test_run_environment_that_changes_what_runs_is_refused(name: str) -> None:
    decision = check_command(["ls"], ALLOWED, trusted_dirs=TRUSTED, cwd=WS, env=[name, "FOO"])
    assert (decision.allowed, decision.rule) == (False, f"command.env:{name}")
    assert check_command(["ls"], ALLOWED, trusted_dirs=TRUSTED, cwd=WS, env=["FOO"]).allowed


@pytest.mark.parametrize("script", [
    "echo ${s:1:2} ${s: -1} ${#s} ${s%%.*} ${s//a/b} ${a[@]} ${a[0]} ${HOME:-/tmp} ${x@Q}",
    'cat <<EOF\n${HOME} and $USER\nEOF',
    '[ -f "$f" ] && [ "$x" = y ] && [ -n "$z" ] && test ! -d "$d" && [ "$#" -eq 0 ]',
    "export FOO=1 BAR=$HOME; declare -a arr; unset x y; read -r a b <f; printf -v out %s x",
    "unset -f my-func; exec -a name ls; ( (ls) )",
    "bash -ec 'ls' && bash -o pipefail -c ls && bash -xc ls",
])
def test_ordinary_scripts_still_pass(script: str) -> None:
    decision = decide("bash", "-c", script)
    assert decision.allowed, decision.reason


@pytest.mark.parametrize("argv", [
    ("xargs", "-I{}", "sh", "-c", 'echo "$1"', "sh", "{}"),
    ("find", ".", "-exec", "sh", "-c", 'cat "$1"', "sh", "{}", ";"),
    ("xargs", "nice", "ls"),
    ("env", "-S", "A=1 ls"),
])
def test_ordinary_wrappers_still_pass(argv: tuple[str, ...]) -> None:
    decision = check_command(list(argv), [*ALLOWED, "nice"], trusted_dirs=TRUSTED, cwd=WS)
    assert decision.allowed, decision.reason
