"""Variables that make a shell run code at start-up are never passed into a sandbox."""

from __future__ import annotations

import pytest

from warden.core.errors import Denied
from warden.core.shell_env import SHELL_STARTUP_ENV, is_shell_startup_name, refuse_shell_startup_env


@pytest.mark.parametrize("name", ["BASH_ENV", "ENV", "BASH_FUNC_ls%%", "BASH_FUNC_x", "PROMPT_COMMAND",
                                  "SHELLOPTS", "BASHOPTS", "PS4", "SSH_CLIENT"])
def test_start_up_names_are_refused(name: str) -> None:
    assert is_shell_startup_name(name)
    with pytest.raises(Denied) as caught:
        refuse_shell_startup_env(["FOO", name])
    assert caught.value.rule == f"env.shell_startup:{name}" and "\n" not in caught.value.message


def test_ordinary_names_pass() -> None:
    refuse_shell_startup_env(["FOO", "API_TOKEN", "ENVIRONMENT", "BASH", "MY_BASH_ENV"])
    assert "PATH" not in SHELL_STARTUP_ENV  # a run may set PATH; only the allowlist cares
