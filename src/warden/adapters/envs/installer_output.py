"""Following an installer's stderr line by line, to count packages as they are done.

uv says per package nothing on a pipe but its totals ("Prepared 10 packages in 40ms"), so the
layer build asks it for a few of its own log events (`RUST_LOG`, see `UV_LOG`): the unpacked
wheel's cache lock released (one per package prepared: downloaded, or built from an sdist) and
an installed package's RECORD written. pip prints "Collecting x" (or "Processing ./x-1.0.whl"
for a local file) and "Installing collected packages: a, b" on its own. Lines that match none of
these are ignored, so another uv's wording makes the bar coarser, never wrong: the totals still
end each phase.

Every line is a tool's output about packages from an index: names are only ever shown, cut
short and stripped of control characters, and never decide anything but a count.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable

from warden.adapters.envs.progress import Tally
from warden.core.layers import UV_PROGRESS_LOG, is_uv_log_line

__all__ = ["UV_LOG", "InstallerOutput", "is_log_line"]

UV_LOG = UV_PROGRESS_LOG  # what uv is asked to log: which packages it prepared, and installed

_PREPARED = re.compile(r"^TRACE Released lock at `[^`]*/wheels-v\d+/[^`]*?/([^/`]+)/[^/`]+`")
_INSTALLED = re.compile(r'^TRACE Writing record name=PackageName\("([^"]+)"\)')
_UV_TOTAL = re.compile(r"^(Resolved|Prepared|Installed) (\d+) packages? in ")
_UV_BUILD = re.compile(r"^\s*(?:Building|Built) ([A-Za-z0-9._-]+)")
_PIP_COLLECT = re.compile(r"^Collecting ([A-Za-z0-9._-]+)")
_PIP_PROCESS = re.compile(r"^Processing \S*?([A-Za-z0-9._]+)-[^/\s]*\.(?:whl|tar\.gz|zip)\b")  # a local file
_PIP_INSTALLING = re.compile(r"^Installing collected packages: (.+)$")
_PIP_DONE = re.compile(r"^Successfully installed (.+)$")
# npm at --loglevel=http: each package's tarball, fetched or found in its cache (a registry's
# URL ends `[@scope/]name/-/name-1.0.0.tgz`), then "added 12 packages in 2s".
_NPM_TARBALL = re.compile(r"^npm http (?:fetch GET 200|cache \S+@)\s*\S*?((?:@[^/\s]+/)?[^/@\s]+)/-/[^/\s]+\.tgz\b")
_NPM_DONE = re.compile(r"^(?:added|changed) (\d+) packages?\b")
_SHOWN = re.compile(r"[^A-Za-z0-9._@/-]")


is_log_line = is_uv_log_line  # a line of uv's own log, left out of an error's tail


def _shown(name: str) -> str:
    return _SHOWN.sub("", name)[:60]


def _key(name: str) -> str:
    """PEP 503's normalized name: uv's cache folders and pip's lines spell names differently."""
    return re.sub(r"[-_.]+", "-", name).lower()


class InstallerOutput:
    """A sink for an installer's stderr (bytes in any chunks) moving `tally`.

    `expected`: the packages it will install when known (a layer's lock), so only those count;
    otherwise the total is learnt from the output (uv's "Resolved N", pip's "Installing collected
    packages"). The step's bar is shared: the first half for packages prepared, the second for
    those installed."""

    def __init__(self, tally: Tally, expected: Iterable[str] = ()) -> None:
        self.tally = tally
        self.expected = {_key(name) for name in expected}
        self.prepared: set[str] = set()
        self.installed: set[str] = set()
        self._streams = [_Lines(self.line)]
        self._lock = threading.Lock()  # stdout's and stderr's readers may be two threads
        tally.at(0, phase="prepared", share=(0.0, 0.5))

    def __call__(self, chunk: bytes) -> None:
        self._streams[0](chunk)

    def other(self) -> Callable[[bytes], None]:
        """A sink for the installer's other stream (pip says what it collects on stdout), its
        lines cut apart on their own."""
        lines = _Lines(self.line)
        self._streams.append(lines)
        return lines

    def close(self) -> None:
        """The last partial lines, and the tally's last count."""
        for lines in self._streams:
            lines.close()
        self.tally.close()

    def line(self, line: str) -> None:
        """One line of output."""
        with self._lock:
            self._line(line)

    def _line(self, line: str) -> None:
        if match := _PREPARED.match(line):
            self._prepared(match.group(1))
        elif match := _INSTALLED.match(line):
            self._installed(match.group(1))
        elif match := _UV_TOTAL.match(line):
            self._total(match.group(1), int(match.group(2)))
        elif (match := _UV_BUILD.match(line) or _PIP_COLLECT.match(line) or _PIP_PROCESS.match(line)):
            self._prepared(match.group(1))
        elif match := _PIP_INSTALLING.match(line):
            names = [n.strip() for n in match.group(1).split(",") if n.strip()]
            self._learn(len(names))
            self._phase_done("prepared")
            self.tally.at(0, names[-1] if names else "", phase="installing", share=(0.5, 0.5))
        elif match := _PIP_DONE.match(line):
            self._phase_done("installed")
        elif match := _NPM_TARBALL.match(line):
            self._prepared(match.group(1))
        elif match := _NPM_DONE.match(line):  # npm says no package installed, only how many
            self._learn(int(match.group(1)))
            self._phase_done("prepared")
            self._phase_done("installed")

    def _counts(self, key: str) -> bool:
        return not self.expected or key in self.expected

    def _learn(self, total: int) -> None:
        if not self.expected and total > 0:
            self.tally.of = total

    def _prepared(self, name: str) -> None:
        key = _key(name)
        if self.tally.phase != "prepared" or key in self.prepared or not self._counts(key):
            return
        self.prepared.add(key)
        if not self.expected:  # the total not said yet (pip): it is at least what was seen
            self.tally.of = max(self.tally.of, len(self.prepared))
        self.tally.at(len(self.prepared), _shown(name))

    def _installed(self, name: str) -> None:
        key = _key(name)
        if key in self.installed or not self._counts(key):
            return
        if self.tally.phase == "prepared":  # uv installs once all are prepared (some were cached)
            self._phase_done("prepared")
        self.installed.add(key)
        self.tally.at(len(self.installed), _shown(name), phase="installed", share=(0.5, 0.5))

    def _total(self, what: str, n: int) -> None:
        if what == "Resolved":
            self._learn(n)
        elif what == "Prepared":
            self._phase_done("prepared")
        else:  # "Installed": uv compiles bytecode next, with nothing to count
            self._phase_done("installed")

    def _phase_done(self, phase: str) -> None:
        share = (0.0, 0.5) if phase == "prepared" else (0.5, 0.5)
        self.tally.at(self.tally.of, phase=phase, share=share, final=True)


class _Lines:
    """Bytes in any chunks to whole lines (decoded; a character cut between chunks survives)."""

    def __init__(self, line: Callable[[str], None]) -> None:
        self._line = line
        self._rest = b""

    def __call__(self, chunk: bytes) -> None:
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        if len(self._rest) > 64 * 1024:  # one endless "line": not an installer's
            self._rest = b""
        for line in lines:
            self._line(line.decode("utf-8", "replace").rstrip("\r"))

    def close(self) -> None:
        if self._rest:
            self._line(self._rest.decode("utf-8", "replace"))
            self._rest = b""
