"""What `warden serve` prints first: a newcomer copies its examples, so they must read and parse as given."""

from __future__ import annotations

import re

from warden.interfaces.cli.cmd_serve import connect_help


def test_the_connect_help_names_the_url_and_speaks_the_users_words() -> None:
    text = connect_help("http://127.0.0.1:8787", "sqlite:////home/u/.warden/warden.db")
    assert "http://127.0.0.1:8787/docs" in text and "sqlite:////home/u/.warden/warden.db" in text
    # Internal history ("seed 000's ...") once leaked into this banner; a user cannot know what it means.
    assert re.search(r"\bseed \d", text) is None


def test_the_python_example_in_the_connect_help_compiles() -> None:
    text = connect_help("http://127.0.0.1:8787", "sqlite://")
    lines = [line.strip() for line in text.splitlines()
             if line.strip().startswith(("from warden", "ws = ", "print(ws"))]
    assert len(lines) == 3
    compile("\n".join(lines), "<connect help>", "exec")


def test_the_connect_help_names_a_python_that_has_the_sdk() -> None:
    # The system's python3 has no `warden` module: step 2 pasted there failed with no word of which
    # Python to use. The banner names the interpreter serving, which has it.
    text = connect_help("http://127.0.0.1:8787", "sqlite://", "/src/warden/.venv/bin/python")
    assert "from Python (/src/warden/.venv/bin/python has the SDK)" in text
