"""Reading an installer's stderr into per-package progress: uv's log events (captured from uv
0.13 with `RUST_LOG=UV_LOG`, paths shortened) and pip's own lines, in chunks cut anywhere."""

from __future__ import annotations

import io

from warden.adapters.envs.installer_output import InstallerOutput, is_log_line
from warden.adapters.envs.progress import Progress

UV_SYNC = """\
TRACE Checking lock for `c5` at `c5/.lock`
TRACE Acquired shared lock for `c5`
TRACE Checking lock for `c5/wheels-v8/index/037a18e88efce1e0/idna/3.20-py3-none-any.lock` at `c5/wheels-v8/index/037a18e88efce1e0/idna/3.20-py3-none-any.lock`
TRACE Acquired exclusive lock for `c5/wheels-v8/index/037a18e88efce1e0/idna/3.20-py3-none-any.lock`
TRACE Released lock at `c5/wheels-v8/index/037a18e88efce1e0/idna/3.20-py3-none-any.lock`
TRACE Released lock at `c5/wheels-v8/index/037a18e88efce1e0/markdown-it-py/4.2.0-py3-none-any.lock`
TRACE Released lock at `c5/wheels-v8/index/037a18e88efce1e0/attrs/26.1.0-py3-none-any.lock`
TRACE Extracting wheel files name=PackageName("idna")
TRACE Extracted wheel files name=PackageName("idna")
TRACE Writing installer metadata name=PackageName("idna")
TRACE Writing record name=PackageName("idna")
TRACE Extracting wheel files name=PackageName("markdown-it-py")
TRACE Writing record name=PackageName("markdown-it-py")
TRACE Writing record name=PackageName("attrs")
TRACE Released lock at `v5/.lock`
"""  # noqa: E501 - uv's lines as it prints them

PIP_INSTALL = """\
Looking in links: /wheels
Collecting six
  Downloading six-1.17.0-py2.py3-none-any.whl (11 kB)
Collecting tiny_dep>=1
  Using cached tiny_dep-1.0-py3-none-any.whl
Processing ./wh/pdep0-1.0-py3-none-any.whl (from six)
Installing collected packages: tiny-dep, pdep0, six
Successfully installed pdep0-1.0 six-1.17.0 tiny-dep-1.0
"""


def _feed(sink: InstallerOutput, text: str, size: int) -> None:
    data = text.encode()
    for at in range(0, len(data), size):
        sink(data[at:at + size])
    sink.close()


def _counts(out: io.StringIO) -> list[str]:
    return [line.rsplit(": ", 1)[1] for line in out.getvalue().splitlines() if ": " in line]


def test_uv_log_moves_through_each_package_prepared_then_installed() -> None:
    for size in (1, 7, 4096):  # a pipe hands over chunks cut anywhere, even mid-character
        out = io.StringIO()
        bar = Progress("building Python layer L", 4, out)
        bar.step("installing 3 packages")
        follow = InstallerOutput(bar.count(3, "installed"), ["attrs", "idna", "Markdown_It_Py"])
        _feed(follow, UV_SYNC, size)
        assert _counts(out) == ["0/3 prepared", "1/3 prepared (idna)", "2/3 prepared (markdown-it-py)",
                                "3/3 prepared (attrs)", "1/3 installed (idna)", "2/3 installed (markdown-it-py)",
                                "3/3 installed (attrs)"], size
        positions = [line.index("-") if "-" in line.split("]")[0] else 99 for line in out.getvalue().splitlines()]
        assert positions == sorted(positions)  # the bar only moves forward


def test_packages_not_in_the_lock_and_repeats_are_not_counted() -> None:
    out = io.StringIO()
    bar = Progress("L", 2, out)
    bar.step("installing")
    follow = InstallerOutput(bar.count(2, "installed"), ["idna", "attrs"])
    _feed(follow, UV_SYNC + UV_SYNC, 4096)  # markdown-it-py is not expected; each counts once
    assert _counts(out)[-1] == "2/2 installed (attrs)"
    assert not any("markdown" in c for c in _counts(out))


def _installed(output: str, chunk: int, of: int) -> list[str]:
    """The counts a one-step bar showed while `output` came `chunk` bytes at a time."""
    out = io.StringIO()
    bar = Progress("installing into w", 1, out)
    bar.step("installing")
    follow = InstallerOutput(bar.count(of, "installed"))
    _feed(follow, output, chunk)
    return _counts(out)


def test_pip_output_learns_the_total_and_counts_collected_then_installed() -> None:
    counts = _installed(PIP_INSTALL, 13, 1)
    assert counts[:3] == ["0/1 prepared", "1/1 prepared (six)", "2/2 prepared (tiny_dep)"], counts  # total unsaid
    assert counts[-3:] == ["3/3 prepared (pdep0)", "0/3 installing (six)", "3/3 installed (six)"], counts


# `npm install --loglevel=http is-odd @types/node` (npm 10), captured: packuments first (not
# counted), then each tarball found in the cache and fetched.
NPM_INSTALL = """\
npm http fetch GET 200 https://registry.npmjs.org/is-odd 206ms (cache miss)
npm http fetch GET 200 https://registry.npmjs.org/is-number 8ms (cache miss)
npm http cache is-number@https://registry.npmjs.org/is-number/-/is-number-6.0.0.tgz 0ms (cache hit)
npm http cache is-odd@https://registry.npmjs.org/is-odd/-/is-odd-3.0.1.tgz 0ms (cache hit)
npm http fetch GET 200 https://registry.npmjs.org/is-number/-/is-number-6.0.0.tgz 43ms (cache miss)
npm http fetch GET 200 https://registry.npmjs.org/is-odd/-/is-odd-3.0.1.tgz 44ms (cache miss)
npm http fetch GET 200 https://registry.npmjs.org/@types/node/-/node-20.1.0.tgz 51ms (cache miss)

added 3 packages in 766ms
"""


def test_npm_http_log_counts_each_tarball_then_what_npm_added() -> None:
    counts = _installed(NPM_INSTALL, 7, 2)
    assert counts == ["0/2 prepared", "1/2 prepared (is-number)", "2/2 prepared (is-odd)",
                      "3/3 prepared (@types/node)", "3/3 installed (@types/node)"], counts


def test_hostile_names_are_shown_without_control_characters() -> None:
    out = io.StringIO()
    bar = Progress("L", 1, out)
    bar.step("installing")
    follow = InstallerOutput(bar.count(1, "installed"))
    _feed(follow, 'TRACE Writing record name=PackageName("evil\x1b[2J\x07")\n', 4096)
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    assert _counts(out)[-1] == "1/1 installed (evil2J)"


def test_uv_log_lines_are_told_apart_from_its_messages() -> None:
    assert is_log_line("TRACE Writing record name=PackageName(\"x\")")
    assert is_log_line("DEBUG Identified uncached distribution: x==1")
    assert not is_log_line("error: No solution found when resolving dependencies:")
    assert not is_log_line("  × No solution found")
