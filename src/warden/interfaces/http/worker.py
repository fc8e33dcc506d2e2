"""The API for a `warden serve --workers N` worker process (uvicorn imports this factory)."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from typing import TYPE_CHECKING

from fastapi import FastAPI

if TYPE_CHECKING:
    from warden.bootstrap import App

__all__ = ["app_from_environment"]

_PR_SET_PDEATHSIG = 1  # prctl(2)


def app_from_environment() -> FastAPI:
    """A worker's API: $WARDEN_HOME and settings from the environment the server passed down."""
    from warden.bootstrap import bootstrap
    from warden.interfaces.http import create_app

    _end_with_the_server()
    app = bootstrap()
    app.serving = True  # its requests are bots': no terminal's lock is theirs
    _act_for_the_server(app)
    return create_app(app)


def _act_for_the_server(app: App) -> None:
    """The live sandboxes this worker starts are the server's instance's (the server registers
    once, for its supervisor), so they are stopped when it is found dead, as one worker's are:
    they named no instance, and after a `kill -9` of the server a bot's background processes ran
    on, stopped by nobody. The instance is looked up by the server's pid in the registry (the
    environment is a client's to choose, bootstrap.act_for)."""
    from warden.bootstrap import act_for

    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return
    try:
        server = app.instances.of_process(parent.pid)
    except Exception:  # a registry not answering now: the worker serves, its sandboxes unowned as before
        return
    if server is not None:
        act_for(server.id)


def _end_with_the_server() -> None:
    """Have this worker stopped (SIGTERM: uvicorn's graceful stop) when the server that spawned it
    dies. The server registers the node's instance and beats for it: a worker that outlived a
    `kill -9` of it served bots on with no heartbeat, its node `down` to the other nodes, and
    held the port a restarted server needed. uvicorn's supervisor never tells a worker it is
    gone (the health-check pipe's both ends are in the worker, so it never reads EOF).
    PR_SET_PDEATHSIG fires when the thread that spawned us ends: uvicorn spawns and respawns
    workers from its main thread, which lives as long as the server."""
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return  # not fatal: the worker serves as it did before
    if os.getppid() != parent.pid:  # the server died before the line above: nothing will signal us
        os.kill(os.getpid(), signal.SIGTERM)
