"""Warden's launcher for live sandboxes (src/warden/adapters/sandbox/rlimit_exec.c), built for a
test by the script scripts/setup builds it with: the package's source, or a copy that notes each
start it makes. A test that needs it is skipped only where there is no C compiler."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "warden" / "adapters" / "sandbox" / "rlimit_exec.c"
BUILD = ROOT / "scripts" / "build-rlimit-exec"
_NO_COMPILER = 3  # scripts/build-rlimit-exec's status without cc or gcc

# Where the launcher execs the command: a noting copy appends a line to its note file first.
_EXEC = "    long error = -sys4(SYS_execve, (long)path, (long)args, (long)envp, 0);\n"
_NOTE = """    {{
#if defined(__x86_64__)
        long opened = sys4(257, -100, (long)"{note}", 02002101, 0644);
#else
        long opened = sys4(56, -100, (long)"{note}", 02002101, 0644);
#endif
        sys4(SYS_write, opened, (long)"started\\n", 8, 0);
    }}
"""  # openat(AT_FDCWD, note, O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0644)


def build_launcher(output: Path, source: str | None = None) -> Path:
    """The launcher built into `output` (from `source`, a variant's text, else the package's)."""
    args = [str(BUILD), str(output)]
    output.parent.mkdir(parents=True, exist_ok=True)
    if source is not None:
        variant = output.with_suffix(".c")
        variant.write_text(source)
        args.append(str(variant))
    built = subprocess.run(args, capture_output=True, text=True, check=False)
    if built.returncode == _NO_COMPILER:
        pytest.skip("no C compiler: Warden starts live sandboxes' commands through prlimit")
    assert built.returncode == 0, built.stderr
    return output


def noting_source(note: Path) -> str:
    """The launcher's source, changed to append a line to `note` (a path inside the sandbox) each
    time it is about to exec a command. (Its build runs it once, to check it works.)"""
    source = SOURCE.read_text()
    assert source.count(_EXEC) == 1, "the launcher's exec moved: update tests/support/launcher.py"
    return source.replace(_EXEC, _NOTE.format(note=note) + _EXEC)
