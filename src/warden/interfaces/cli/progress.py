"""Progress of `warden install` on stderr (none with --json).

The bar itself is adapters/envs/progress.py (the layer builds'); here the CLI's side of it: the
installer's output (uv's stderr, pip's stdout) read line by line as the sandboxed run goes,
moving the bar through each package and naming it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from warden.core.runs import Sink

__all__ = ["installing"]


@contextlib.contextmanager
def installing(title: str, packages: int, *, enabled: bool) -> Iterator[tuple[Sink | None, Sink | None]]:
    """Sinks for the installer's stdout and stderr, moving `title`'s bar through each package
    (None with --json: then nothing is drawn or read)."""
    if not enabled:
        yield None, None
        return
    from warden.adapters.envs.installer_output import InstallerOutput
    from warden.adapters.envs.progress import Progress

    bar = Progress(title, 1)
    bar.step(f"installing {packages} requested package{'s' * (packages != 1)} and what they need")
    follow = InstallerOutput(bar.count(packages, "installed"))
    try:
        yield follow.other(), follow
    except BaseException:
        bar.abandon()
        raise
    follow.close()
    bar.finish()
