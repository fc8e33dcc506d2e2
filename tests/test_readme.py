"""The README's first page runs as written: every ```bash block, in order, in one shell, in a
fresh home (a new $HOME, no WARDEN_HOME), with this checkout's `warden` on PATH, as a newcomer
would type them. A block that cannot run in a test (a server that runs until stopped, a download)
is marked just above its fence with `<!-- readme-test: skip (the reason) -->`, and the reason is
required."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_FENCE = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)
_SKIP = re.compile(r"<!-- readme-test: skip \((?P<reason>[^)]+)\) -->\s*$")


def blocks(text: str) -> list[tuple[str, str | None]]:
    """Each bash block's code and, when it is marked to be skipped, the reason."""
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before)
        if "readme-test" in before and skip is None:
            raise AssertionError(f"a readme-test marker without a reason: {before!r}")
        found.append((match.group(1), skip.group("reason") if skip else None))
    return found


def test_the_markers_are_read() -> None:
    sample = ("x\n<!-- readme-test: skip (runs forever) -->\n```bash\nwarden serve\n```\n"
              "```bash\nwarden list\n```\n")
    assert blocks(sample) == [("warden serve\n", "runs forever"), ("warden list\n", None)]
    with pytest.raises(AssertionError):
        blocks("<!-- readme-test: skip -->\n```bash\nx\n```\n")


@pytest.mark.slow
def test_every_readme_block_runs_in_a_fresh_home(tmp_path: Path) -> None:
    found = blocks(README.read_text())
    runnable = [code for code, reason in found if reason is None]
    assert len(runnable) >= 5 and any("warden create" in code for code in runnable)
    script = ["set -euo pipefail"]
    for number, code in enumerate(runnable, 1):
        script += [f"echo '--- block {number}' >&2", code]
    home = tmp_path / "newcomer"
    home.mkdir()
    bindir = str(Path(sys.executable).parent)
    env = {"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
           "LANG": os.environ.get("LANG", "C.UTF-8"), "USER": os.environ.get("USER", "newcomer"),
           # No home daemon left running after the test (a newcomer's would stay, by design).
           "WARDEN_DAEMON": "0"}
    proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=home, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    last = [line for line in proc.stderr.splitlines() if line.startswith("--- block ")][-1:]
    assert proc.returncode == 0, f"{last}: status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "hello from the sandbox" in proc.stdout
    assert "first idea" in proc.stdout
    assert (home / ".warden").is_dir()  # the default home, as the README says


def test_the_readme_tells_a_newcomer_where_zones_are_set() -> None:
    """A newcomer's trial found no word of zones on the first page: they are a hand-edited file
    (`warden fs` refuses `.warden/`), so the README has to say where, and point to the details."""
    text = README.read_text()
    paragraph = next(p for p in text.split("\n\n") if ".warden/zones.yaml" in p)
    assert "docs/files.md#files-and-policy" in paragraph and "by hand" in paragraph
    files = (README.parent / "docs" / "files.md").read_text()
    assert "\n## Files and policy\n" in files and "zones.yaml" in files  # the anchor it links to
