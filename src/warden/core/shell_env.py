"""Environment variables that make a shell run code before (or beside) its command (pure).

A shell reads these at start-up and acts on them: `BASH_ENV=./x bash -c ls` sources `./x`
first, so `ls` is not all that runs. Neither the command allowlist nor a person reading the
audit sees that code, so Warden passes none of them into a sandbox, from any source: a run's
`--env`, the API's `env`, the Python API's `env`, or a script's own `NAME=... cmd`/`export`
(core/commands.py refuses those).
"""

from __future__ import annotations

from collections.abc import Iterable

from warden.core.errors import Denied

__all__ = ["SHELL_STARTUP_ENV", "is_shell_startup_name", "refuse_shell_startup_env"]

SHELL_STARTUP_ENV = frozenset({
    "BASH_ENV",        # bash(1) INVOCATION: a non-interactive bash sources $BASH_ENV first
    "ENV",             # sh, dash, ksh and `bash --posix` source $ENV (interactive shells)
    "SHELLOPTS",       # bash turns these `set -o` options on at start-up (e.g. xtrace, below)
    "BASHOPTS",        # the same for `shopt` options
    "PS0", "PS1", "PS2", "PS3",  # prompts are expanded, `$(...)` included
    "PS4",             # expanded before every command under xtrace: `PS4='$(rm x)' SHELLOPTS=xtrace`
    "PROMPT_COMMAND",  # run before each prompt
    "SSH_CLIENT", "SSH2_CLIENT",  # Debian's bash -c sources ~/.bashrc (the workspace's) when set
    "SHLVL",           # below 2, bash -c with a socket on stdin sources ~/.bashrc too
    "ZDOTDIR",         # where zsh reads .zshenv, which it sources on every start
})
# bash imports `BASH_FUNC_name%%=() { ...; }` as a function that shadows the program `name`.
_STARTUP_PREFIXES = ("BASH_FUNC_",)


def is_shell_startup_name(name: str) -> bool:
    """True for a variable a shell acts on at start-up (SHELL_STARTUP_ENV or BASH_FUNC_*)."""
    return name in SHELL_STARTUP_ENV or name.startswith(_STARTUP_PREFIXES)


def refuse_shell_startup_env(names: Iterable[str]) -> None:
    """Raise Denied (rule `env.shell_startup:NAME`) for the first shell start-up variable."""
    for name in names:
        if is_shell_startup_name(name):
            raise Denied(f"environment variable {name} makes a shell run code before its command, "
                         "which nothing checks; Warden does not pass it, so leave it out",
                         rule=f"env.shell_startup:{name}")
